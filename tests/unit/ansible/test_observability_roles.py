"""The roles that put the cluster in Prometheus (issue 22): `cluster-tool watch` as a hardened
systemd service on its host (roles/cluster_tool_watch), node_exporter serving the watcher's
textfile (roles/node_exporter), and dcgm-exporter with a counters file that carries the XID,
NVLink, ECC and remapped-row fields (roles/dcgm_exporter). Rendered with the roles' own
defaults, as a node would get them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_tool.ansible import run_playbook
from tests.conftest import REPO

RENDER = Path(__file__).parent / "playbooks" / "role_template.yml"
WATCH_UNIT = "etc/systemd/system/cluster-tool-watch.service"
WATCH_ENV = "etc/cluster-tool/watch.env"
COUNTERS = "etc/dcgm-exporter/cluster-tool-counters.csv"
DROPIN = "etc/systemd/system/dcgm-exporter.service.d/cluster-tool.conf"
NODE_EXPORTER_ARGS = "etc/default/prometheus-node-exporter"

# dcgm-exporter's own default counters file, the fields it leaves switched on, read by hand from
# github.com/NVIDIA/dcgm-exporter etc/default-counters.csv (main, 2025).
UPSTREAM_DEFAULT_FIELDS = {
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
}  # fmt: skip
# ...and the error fields the same file carries commented out, which an operator pages on.
ERROR_FIELDS = {
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
}  # fmt: skip


def render(tmp_path: Path, role: str, templates: list[str], **extra: Any) -> dict[str, str]:
    """The role's templates rendered with its defaults and internal variables (+ `extra`)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        "      ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
    )
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    result = run_playbook(
        RENDER,
        inventory,
        extravars={"role_name": role, "templates": templates, "out": str(out), **extra},
        private_data_dir=tmp_path / "pdd",
        fact_cache=tmp_path / "facts",
    )
    assert result.rc == 0, [e.message for e in result.events if e.failed]
    return {t: (out / Path(t).name).read_text() for t in templates}


SECRET = "s3cr3t-t0ken"


@pytest.fixture(scope="module")
def watch_defaults(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return render(tmp_path_factory.mktemp("watch"), "cluster_tool_watch", [WATCH_UNIT])


@pytest.fixture(scope="module")
def watch_site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A site's choices: policy, Slurm and ssh options, a secret; cluster-tool stood in by
    /bin/true so that systemd can verify the unit here."""
    return render(
        tmp_path_factory.mktemp("site"), "cluster_tool_watch", [WATCH_UNIT, WATCH_ENV],
        cluster_tool_watch_policy="requeue", cluster_tool_watch_slurm_via="head",
        cluster_tool_watch_ssh_config="/etc/cluster-tool/ssh_config",
        cluster_tool_watch_environment={"SITE_TOKEN": SECRET},
        cluster_tool_watch_executable="/bin/true",
    )  # fmt: skip


@pytest.fixture(scope="module")
def dcgm_exporter(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    extra = [{"field": "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "type": "gauge",
              "help": "Current clock throttle reasons, a bitmask"}]  # fmt: skip
    return render(tmp_path_factory.mktemp("dcgm"), "dcgm_exporter", [COUNTERS, DROPIN],
                  dcgm_exporter_extra_counters=extra)  # fmt: skip


def unit_settings(text: str) -> dict[str, list[str]]:
    """systemd unit text -> directive -> its values, in order (comments dropped)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def counter_fields(text: str) -> dict[str, str]:
    """dcgm-exporter's counters CSV -> field -> Prometheus type."""
    rows = [line.split(",") for line in text.splitlines() if line.strip() and line[0] != "#"]
    assert all(len(r) == 3 for r in rows), rows
    return {r[0].strip(): r[1].strip() for r in rows}


def test_the_watch_unit_runs_watch_with_its_state_under_var_lib(
    watch_defaults: dict[str, str],
) -> None:
    unit = unit_settings(watch_defaults[WATCH_UNIT])
    argv = unit["ExecStart"][0].split()
    assert argv[:4] == ["/opt/cluster-tool/bin/cluster-tool", "watch", "--spec",
                        "/etc/cluster-tool/cluster.json"]  # fmt: skip
    assert argv[argv.index("--state-dir") + 1] == "/var/lib/cluster-tool/watch"
    assert "--policy" not in argv  # the spec's watch.policy unless the inventory says otherwise
    assert unit["StateDirectory"] == ["cluster-tool/watch"]
    assert unit["StateDirectoryMode"] == ["0700"]
    assert unit["Restart"] == ["on-failure"]
    assert unit["SuccessExitStatus"] == ["130"]  # SIGTERM is the contract's 130, not a failure
    # Hardened, yet scontrol (munge's unix socket, slurmctld over TCP) and ssh still work.
    assert unit["ProtectSystem"] == ["strict"] and unit["NoNewPrivileges"] == ["yes"]
    assert unit["ProtectHome"] == ["read-only"]  # ssh reads root's key, writes nothing there
    assert unit["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6"]
    assert unit["CapabilityBoundingSet"] == [""]
    assert "PrivateNetwork" not in unit and "User" not in unit


def test_the_policy_and_connection_options_reach_the_command_line(
    watch_site: dict[str, str],
) -> None:
    argv = unit_settings(watch_site[WATCH_UNIT])["ExecStart"][0].split()
    assert argv[argv.index("--policy") + 1] == "requeue"
    assert argv[argv.index("--slurm-via") + 1] == "head"
    assert argv[argv.index("--ssh-config") + 1] == "/etc/cluster-tool/ssh_config"


def test_secrets_go_to_the_0600_environment_file_never_the_command_line(
    watch_site: dict[str, str],
) -> None:
    files, secret = watch_site, SECRET
    unit = unit_settings(files[WATCH_UNIT])
    assert secret not in files[WATCH_UNIT]
    assert unit["EnvironmentFile"] == ["-/etc/cluster-tool/watch.env"]
    assert f"SITE_TOKEN={secret}" in files[WATCH_ENV].splitlines()
    tasks = (REPO / "roles" / "cluster_tool_watch" / "tasks" / "watch.yml").read_text()
    block = tasks.split("Write the service's environment", 1)[1].split("- name:", 1)[0]
    assert 'mode: "0600"' in block and "no_log: true" in block


def test_node_exporter_serves_the_folder_the_watcher_writes_its_textfile_to(
    tmp_path: Path, watch_defaults: dict[str, str]
) -> None:
    watch = unit_settings(watch_defaults[WATCH_UNIT])
    argv = watch["ExecStart"][0].split()
    textfile = Path(argv[argv.index("--textfile") + 1])
    assert textfile.suffix == ".prom"  # the textfile collector reads *.prom only
    flags = render(tmp_path, "node_exporter", [NODE_EXPORTER_ARGS])[NODE_EXPORTER_ARGS]
    args = next(line for line in flags.splitlines() if line.startswith("ARGS="))
    assert f"--collector.textfile.directory={textfile.parent}" in args.split('"')[1].split()
    assert "--web.listen-address=:9100" in args
    # ProtectSystem=strict leaves that folder writable, and only it besides the state.
    assert watch["ReadWritePaths"] == [str(textfile.parent)]
    # node_exporter reads the file as its own user: the unit's umask lets atomic_write's 0644 be.
    assert watch["UMask"] == ["0022"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_reads_the_watch_unit_without_complaint(
    tmp_path: Path, watch_site: dict[str, str]
) -> None:
    # Every directive is one this systemd knows (a misspelt hardening option is only a warning
    # at start, silently unhardened).
    unit = tmp_path / "cluster-tool-watch.service"
    unit.write_text(watch_site[WATCH_UNIT])
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    complaints = [
        line for line in done.stderr.splitlines()
        if "cluster-tool-watch.service" in line and "Failed to" not in line.split(":", 1)[0]
    ]  # fmt: skip
    assert not [c for c in complaints if "Unknown" in c or "Invalid" in c or "Ignoring" in c], (
        done.stderr
    )


def test_the_counters_file_carries_upstreams_defaults_and_the_error_fields(
    dcgm_exporter: dict[str, str],
) -> None:
    fields = counter_fields(dcgm_exporter[COUNTERS])
    assert set(fields) >= UPSTREAM_DEFAULT_FIELDS
    assert set(fields) >= ERROR_FIELDS
    assert fields["DCGM_FI_DEV_XID_ERRORS"] == "gauge"  # the last Xid's number, not a count
    assert fields["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == "counter"


def test_extra_counters_are_added_and_the_exporter_reads_that_file(
    dcgm_exporter: dict[str, str],
) -> None:
    files = dcgm_exporter
    assert counter_fields(files[COUNTERS])["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == "gauge"
    starts = unit_settings(files[DROPIN])["ExecStart"]
    assert starts[0] == ""  # clears the package's command line before setting the cluster's
    argv = starts[1].split()
    assert argv[argv.index("--collectors") + 1] == "/etc/dcgm-exporter/cluster-tool-counters.csv"
    assert argv[argv.index("--address") + 1] == ":9400"


def test_the_tools_phase_runs_each_where_it_belongs_and_in_order() -> None:
    plays = yaml.safe_load((REPO / "playbooks" / "phases" / "tools.yml").read_text())
    where = [(play["hosts"], [r["role"] for r in play.get("roles", [])]) for play in plays]
    at = {role: (i, hosts) for i, (hosts, roles) in enumerate(where) for role in roles}
    gpu_roles = next(roles for hosts, roles in where if hosts == "gpu")
    # dcgm-exporter reads the host engine the dcgm role starts.
    assert gpu_roles.index("dcgm_exporter") == gpu_roles.index("dcgm") + 1
    assert at["node_exporter"][1] == "all"
    assert at["cluster_tool_watch"][1] == "slurm_controller:management"
    # The watcher runs after cluster-tool is on the controller and node_exporter's textfile
    # folder exists.
    controller = next(
        i for i, (hosts, roles) in enumerate(where)
        if hosts == "slurm_controller" and "cluster_tool_node" in roles
    )  # fmt: skip
    assert at["cluster_tool_watch"][0] > max(controller, at["node_exporter"][0])
