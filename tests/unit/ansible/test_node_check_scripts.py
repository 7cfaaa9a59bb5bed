"""Slurm runs cluster-tool on the nodes (issue 18 finding 10, issue 22): the slurm role's
HealthCheckProgram, Prolog and Epilog scripts as rendered, run with a stand-in for cluster-tool,
and the slurm.conf lines that name them. slurmd runs these with no search path (SchedMD's Prolog
and Epilog Guide) and kills HealthCheckProgram after 60 s (slurm.conf)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from cluster_tool.ansible import run_playbook
from tests.conftest import REPO

RENDER = Path(__file__).parent / "playbooks" / "role_template.yml"
SCRIPTS = ("cluster-tool-healthcheck", "cluster-tool-prolog", "cluster-tool-epilog")


def _render(tmp_path: Path, templates: list[str], **extravars: object) -> Path:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        "      ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
    )
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "nodes.conf").write_text("NodeName=gpu001 CPUs=2\n")
    out = tmp_path / "out"
    out.mkdir()
    result = run_playbook(
        RENDER,
        inventory,
        extravars={
            "role_name": "slurm",
            "templates": templates,
            "out": str(out),
            "slurm_controller_host": "head",
            "slurm_gres_conf_file": "",
            "slurm_topology_conf_file": "",
            **extravars,
        },
        private_data_dir=tmp_path / "pdd",
        fact_cache=tmp_path / "facts",
    )
    assert result.rc == 0, [e.message for e in result.events if e.failed]
    return out


def _run(script: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    script.chmod(0o755)
    return subprocess.run(
        [str(script)], capture_output=True, text=True, timeout=60, check=False, env=env or {}
    )


def test_each_script_runs_node_check_in_its_mode_bounded_and_with_a_search_path(
    tmp_path: Path,
) -> None:
    tool = tmp_path / "cluster-tool"
    # The stand-in says how it was called and with which PATH (slurmd gives none).
    tool.write_text('#!/bin/sh\necho "$* PATH=$PATH JOB=${SLURM_JOB_ID:-}" > "$0.args"\nexit 1\n')
    tool.chmod(0o755)
    out = _render(
        tmp_path,
        [f"usr/local/sbin/{s}" for s in SCRIPTS],
        slurm_node_check_tool=str(tool),
    )
    called = {}
    for script in SCRIPTS:
        done = _run(out / script, {"SLURM_JOB_ID": "77"})
        called[script] = (done.returncode, (tmp_path / "cluster-tool.args").read_text().strip())
    check, prolog, epilog = (called[s] for s in SCRIPTS)
    assert check[1].startswith("node-check --slurm --timeout 40 ")
    assert prolog[1].startswith("node-check --prolog --timeout 30 ")
    assert epilog[1].startswith("node-check --epilog --timeout 30 ")
    for _, args in called.values():
        assert "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in args
        assert args.endswith("JOB=77")
    # The prolog's failure is Slurm's signal to drain and requeue: it is passed on.
    assert prolog[0] == 1
    # Each is bounded by timeout(1), under Slurm's 60 s for the health check.
    text = (out / "cluster-tool-healthcheck").read_text()
    assert "exec timeout -k 5 45 " in text


def test_without_cluster_tool_the_check_fails_loudly_and_refuses_no_job(tmp_path: Path) -> None:
    missing = tmp_path / "not-installed" / "cluster-tool"
    out = _render(
        tmp_path, [f"usr/local/sbin/{s}" for s in SCRIPTS], slurm_node_check_tool=str(missing)
    )
    check = _run(out / "cluster-tool-healthcheck")
    # Not a silent pass: a non-zero exit (slurmd logs it) and the reason on stderr ...
    assert check.returncode == 1
    assert f"{missing} is not installed: this node is not health-checked" in check.stderr
    # ... but no drain (it calls no scontrol) and no job refused fleet-wide.
    assert "scontrol" not in (out / "cluster-tool-healthcheck").read_text()
    assert _run(out / "cluster-tool-prolog", {"SLURM_JOB_ID": "5"}).returncode == 0
    assert _run(out / "cluster-tool-epilog", {"SLURM_JOB_ID": "5"}).returncode == 0


def _slurm_conf(tmp_path: Path, **extravars: object) -> dict[str, str]:
    out = _render(tmp_path, ["etc/slurm/slurm.conf"], **extravars)
    lines = (out / "slurm.conf").read_text().splitlines()
    return dict(ln.split("=", 1) for ln in lines if "=" in ln and not ln.startswith(("#", "Node")))


def test_slurm_conf_names_the_scripts_and_takes_the_specs_interval(tmp_path: Path) -> None:
    conf = _slurm_conf(
        tmp_path, slurm_health_check_interval=15, slurm_health_check_node_state="IDLE,CYCLE"
    )
    assert conf["HealthCheckProgram"] == "/usr/local/sbin/cluster-tool-healthcheck"
    assert (conf["HealthCheckInterval"], conf["HealthCheckNodeState"]) == ("15", "IDLE,CYCLE")
    assert conf["Prolog"] == "/usr/local/sbin/cluster-tool-prolog"
    assert conf["Epilog"] == "/usr/local/sbin/cluster-tool-epilog"
    assert conf["PrologFlags"] == "Alloc"


def test_prolog_and_epilog_can_be_left_out_of_slurm_conf(tmp_path: Path) -> None:
    conf = _slurm_conf(
        tmp_path, slurm_node_check_prolog_enabled=False, slurm_node_check_epilog_enabled=False
    )
    assert "Prolog" not in conf and "Epilog" not in conf and "PrologFlags" not in conf
    assert conf["HealthCheckProgram"] == "/usr/local/sbin/cluster-tool-healthcheck"


def test_the_tools_phase_installs_cluster_tool_on_gpu_nodes_and_the_controller() -> None:
    plays = yaml.safe_load((REPO / "playbooks" / "phases" / "tools.yml").read_text())
    where = {
        play["hosts"]: role
        for play in plays
        for role in play.get("roles", [])
        if role.get("role") == "cluster_tool_node"
    }
    assert set(where) == {"gpu", "slurm_controller"}
    assert where["slurm_controller"]["vars"]["cluster_tool_node_node_file"] is False
    assert "cluster_tool_node_node_file" not in where["gpu"].get("vars", {})
    assert os.path.isfile(REPO / "roles" / "cluster_tool_node" / "files" / "build_artifact.py")


def test_the_role_renders_the_node_file_from_an_inventory_that_carries_ssh_settings(
    tmp_path: Path,
) -> None:
    """The lab (and any site whose tooling adds to the render) puts its SSH settings in
    ansible_vars; the spec file's checks refuse that, the rendered inventory's spec.json is
    still the spec the node file comes from."""
    from cluster_tool.render.engine import render
    from cluster_tool.spec import load_spec

    cluster = load_spec(REPO / "examples" / "lab.yml")
    cluster = cluster.model_copy(
        update={"ansible_vars": {**cluster.ansible_vars, "ansible_user": "root"}}
    )
    render(cluster, tmp_path / "inv")
    cli = [str(REPO / ".venv" / "bin" / "cluster-tool"), "node-file", "gpu002"]
    by_spec = subprocess.run(
        [*cli, "--spec", str(tmp_path / "inv" / "spec.json")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert by_spec.returncode == 2 and "ansible_user" in by_spec.stderr
    done = subprocess.run(
        [*cli, "--inventory", str(tmp_path / "inv")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = yaml.safe_load(done.stdout)
    assert data["node"] == "gpu002" and data["cluster"] == cluster.name
    assert len(data["cables"]) == len(cluster.host("gpu002").profile.compute_hcas)  # type: ignore[union-attr]
    missing = subprocess.run(
        [*cli, "--inventory", str(tmp_path / "nowhere")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
