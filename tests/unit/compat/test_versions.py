"""The version probe run under sh with the tools' real output formats, read back per node, and
`cluster-tool versions` over a saved capture: the fleet table, version.incompatible when the
fabric manager is not the driver, version.outlier for the one adapter on other firmware,
nothing on a fleet that runs what the spec pins."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cluster_tool.checks.versions import NodeVersions, from_version_lines
from cluster_tool.cli import main
from cluster_tool.errors import ParseError
from cluster_tool.parsers.versions import parse_versions
from cluster_tool.probes import ProbeOutput
from cluster_tool.probes.node import HEALTH_PROBES
from cluster_tool.probes.versions import COMMAND, PYXIS_PLUGIN, Versions
from cluster_tool.remote.fanout import HostResult, save_capture

ROOT = Path(__file__).resolve().parents[3]
REAL = ROOT.parent / "shared" / "fixtures" / "real-outputs"
LAB_SPEC = ROOT / "examples" / "lab.yml"

# `nv-fabricmanager --version` as gpud's parser test holds it (github.com/leptonai/gpud,
# parseFabricManagerVersion), on the driver of gpud's 8x H100 nvidia-smi capture.
FM_VERSION_OUTPUT = "\n\n\tFabric Manager version is : 535.161.08\n\n"
# dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\n': Status-Abbrev is three
# characters ("ii " installed, "hi " installed and held, as the roles hold what they pin, "rc "
# removed with its config left). slurmd's version is Debian 12's
# (sources.debian.org/src/slurm-wlm/22.05.8-4+deb12u3).
DPKG_OUTPUT = (
    "hi  nvidia-fabricmanager-535 535.154.05-1\n"
    "hi  doca-ofed 2.9.1-1\n"
    "hi  libnccl2 2.21.5-1+cuda12.4\n"
    "hi  nccl-rdma-sharp-plugins 2.7-1\n"
    "ii  slurmd 22.05.8-4+deb12u3\n"
    "rc  slurm-smd-slurmd 24.05.5-1\n"
)


def read(node: str, text: str) -> NodeVersions:
    return from_version_lines(node, parse_versions(text))


def run_probe(tmp_path: Path, tools: dict[str, str]) -> str:
    """The probe's command under sh, with stand-ins for the tools that print `tools[name]`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in tools.items():
        (bin_dir / f"{name}.txt").write_text(text)
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\ncat '{bin_dir / name}.txt'\n")
        script.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    if "dpkg-query" not in tools:
        env["PATH"] = f"{bin_dir}:{_without('dpkg-query', tmp_path)}"
    done = subprocess.run(
        ["sh", "-c", COMMAND], capture_output=True, text=True, env=env, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _without(tool: str, tmp_path: Path) -> str:
    """A PATH of /usr/bin and /bin links lacking `tool` (this machine may have dpkg)."""
    only = tmp_path / "sys"
    only.mkdir()
    for folder in ("/usr/bin", "/bin"):
        for entry in Path(folder).iterdir():
            target = only / entry.name
            if entry.name != tool and not target.exists():
                target.symlink_to(entry)
    return str(only)


def test_the_probe_reads_the_daemon_and_the_packages(tmp_path: Path) -> None:
    text = run_probe(tmp_path, {"nv-fabricmanager": FM_VERSION_OUTPUT, "dpkg-query": DPKG_OUTPUT})
    node = read("gpu001", text)
    facts = node.components()
    # The running daemon's answer, not the package dpkg holds (upgraded under it).
    assert facts["fabricmanager"] == "535.161.08"
    assert facts["doca"] == "2.9.1"
    assert facts["nccl"] == "2.21.5-1+cuda12.4"
    assert facts["sharp_plugin"] == "2.7"
    # Debian's slurmd; SchedMD's package was removed (rc) and does not count.
    assert facts["slurm"] == "22.05.8"
    assert facts["kernel"]  # uname -r of this machine


def test_without_the_daemon_binary_the_fabric_manager_package_stands_in(tmp_path: Path) -> None:
    text = run_probe(tmp_path, {"dpkg-query": DPKG_OUTPUT})
    assert read("gpu001", text).components()["fabricmanager"] == "535.154.05"


def test_a_node_without_dpkg_still_reports_what_it_has(tmp_path: Path) -> None:
    text = run_probe(tmp_path, {"nv-fabricmanager": FM_VERSION_OUTPUT})
    facts = read("gpu001", text).components()
    assert facts["fabricmanager"] == "535.161.08"
    assert "doca" not in facts and "kernel" in facts


def test_hca_lines_give_model_firmware_and_psid() -> None:
    # ibstat_h100_8xcx7 capture: CA type MT4129, firmware 28.41.1000 (sysfs hca_type/fw_ver).
    node = read(
        "gpu001",
        "module nvidia 535.161.08\nhca mlx5_0 MT4129 28.41.1000 MT_0000000838\n"
        "hca mlx5_bond_0 MT41692 32.38.3056 -\n",
    )
    assert node.nvidia_driver == "535.161.08"
    assert [(h.name, h.model, h.firmware, h.psid) for h in node.hcas] == [
        ("mlx5_0", "ConnectX-7", "28.41.1000", "MT_0000000838"),
        ("mlx5_bond_0", "BlueField-3", "32.38.3056", None),
    ]


def test_a_line_the_probe_does_not_print_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="line 2"):
        parse_versions("kernel 6.1.0-27-amd64\nNVRM version: 550.127.08\n")


def test_the_probe_rides_with_the_health_probes() -> None:
    assert any(isinstance(p, Versions) for p in HEALTH_PROBES)


# --- the fleet, from a saved capture ------------------------------------------------------

HEALTHY = """kernel 6.1.0-27-amd64
module nvidia 570.172.08
fabricmanager 570.172.08
package doca-ofed 3.1.0-1
package libnccl2 2.26.2-1+cuda12.8
package nccl-rdma-sharp-plugins 2.7-1
package slurmd 22.05.8-4+deb12u3
hca mlx5_0 MT4129 28.46.1006 MT_0000000838
hca mlx5_1 MT4129 28.46.1006 MT_0000000838
"""


def lab_nodes() -> list[str]:
    from cluster_tool.spec import load_spec

    return [n.name for n in load_spec(LAB_SPEC).gpu_nodes()]


def capture(tmp_path: Path, change: dict[str, tuple[str, str]] | None = None) -> Path:
    """A versions capture of the lab's GPU nodes running the lab spec's pins (DOCA 3.1.0 with
    the ConnectX-7 firmware it bundles, 28.46.1006), `change` replacing a line on a node."""
    folder = tmp_path / "capture"
    results = {}
    for name in lab_nodes():
        text = HEALTHY
        if change and name in change:
            old, new = change[name]
            assert old in text
            text = text.replace(old, new)
        results[name] = HostResult(name, {"versions": ProbeOutput(0, text)})
    save_capture(folder, results)
    return folder


def versions_json(folder: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:  # type: ignore[type-arg]
    code = main(["versions", "--spec", str(LAB_SPEC), "--from", str(folder), "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_fleet_that_runs_the_pins_has_no_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, data = versions_json(capture(tmp_path), capsys)
    assert (code, data["status"], data["findings"]) == (0, "pass", [])
    rows = {(r["component"], r["version"]): r["count"] for r in data["versions"]}
    nodes = len(lab_nodes())
    assert rows[("fabricmanager", "570.172.08")] == nodes
    assert rows[("hca_firmware ConnectX-7", "28.46.1006")] == nodes


def test_fabric_manager_behind_the_driver_and_one_adapter_behind_its_peers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = lab_nodes()[:2]
    folder = capture(
        tmp_path,
        {
            first: ("fabricmanager 570.172.08", "fabricmanager 570.172.05"),
            second: ("hca mlx5_1 MT4129 28.46.1006", "hca mlx5_1 MT4129 28.46.3048"),
        },
    )
    code, data = versions_json(folder, capsys)
    assert code == 1
    named = [(f["check"], f["node"], f["component"], f["severity"]) for f in data["findings"]]
    assert named == [
        ("version.incompatible", first, "fabricmanager", "error"),
        ("version.outlier", second, "hca_firmware mlx5_1", "warning"),
    ]
    rows = {(r["component"], r["version"]): r["nodes"] for r in data["versions"]}
    assert rows[("fabricmanager", "570.172.05")] == [first]


def test_the_table_names_the_nodes_off_the_common_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = lab_nodes()[0]
    folder = capture(tmp_path, {first: ("kernel 6.1.0-27-amd64", "kernel 6.1.0-26-amd64")})
    # A warning: the exit stays 0.
    assert main(["versions", "--spec", str(LAB_SPEC), "--from", str(folder)]) == 0
    lines = capsys.readouterr().out.splitlines()
    (warning,) = [line for line in lines if line.startswith("WARNING")]
    assert warning.split()[1] == "version.outlier"
    assert f"{first} runs kernel 6.1.0-26-amd64; {len(lab_nodes()) - 1} of" in warning
    kernel = lines.index(next(line for line in lines if line.startswith("kernel")))
    assert lines[kernel].split()[:3] == ["kernel", "6.1.0-27-amd64", str(len(lab_nodes()) - 1)]
    assert lines[kernel + 1].split() == ["6.1.0-26-amd64", "1", first]


def test_a_node_missing_from_the_capture_is_unreachable_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "capture"
    first = lab_nodes()[0]
    save_capture(folder, {first: HostResult(first, {"versions": ProbeOutput(0, HEALTHY)})})
    code, data = versions_json(folder, capsys)
    assert code == 3
    assert {f["check"] for f in data["findings"]} == {"os.unreachable"}
    assert set(data["unreachable"]) == set(lab_nodes()) - {first}


def test_a_validate_capture_without_the_probe_is_read_from_nvidia_smi_and_ibstat(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def real(name: str) -> str:
        return (REAL / name).read_text(encoding="utf-8").split("\n", 1)[1]

    first = lab_nodes()[0]
    outputs = {
        "nvidia-smi-q": ProbeOutput(0, real("nvidia-smi-q_h100x8_driver535.161.08_full.txt")),
        "ibstat": ProbeOutput(0, real("ibstat_h100_8xcx7_ndr_ib_all_active.txt")),
    }
    folder = tmp_path / "capture"
    save_capture(folder, {first: HostResult(first, outputs)})
    main(["versions", "--spec", str(LAB_SPEC), "--from", str(folder), "--nodes", first, "--json"])
    data = json.loads(capsys.readouterr().out)
    drift = [f for f in data["findings"] if f["check"] == "version.drift"]
    assert [(f["node"], f["expected"], f["observed"]) for f in drift] == [
        (first, "570.172.08", "535.161.08")
    ]


def test_versions_needs_a_spec(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["versions"]) == 2
    assert capsys.readouterr().err.strip().endswith("give the cluster spec: --spec FILE")


# --- pyxis and the Slurm it was built against ---------------------------------------------

# What Slurm's spank.h makes every SPANK plugin export (SPANK_PLUGIN(name, ver)) and the
# version word slurm/slurm_version.h defines: SLURM_VERSION_NUM(a,b,c) (((a) << 16) + ((b) << 8)
# + (c)). The compiler, not the probe, puts the word into a real ELF shared object.
SPANK_PLUGIN_C = """
const char plugin_name[] = "pyxis";
const char plugin_type[] = "spank";
const unsigned int plugin_version = (({major}) << 16) + (({minor}) << 8) + ({micro});
const unsigned int spank_plugin_version = 0;
int slurm_spank_init(void *sp, int ac, char **av) {{ return 0; }}
"""


def built_plugin(tmp_path: Path, major: int, minor: int, micro: int) -> Path:
    if not (shutil.which("cc") and shutil.which("readelf")):
        pytest.skip("needs a C compiler and readelf to build a plugin")
    source = tmp_path / "pyxis.c"
    source.write_text(SPANK_PLUGIN_C.format(major=major, minor=minor, micro=micro))
    plugin = tmp_path / "spank_pyxis.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-O2", "-o", str(plugin), str(source)], check=True, timeout=60
    )
    return plugin


def test_the_probe_reads_the_slurm_pyxis_was_built_against(tmp_path: Path) -> None:
    plugin = built_plugin(tmp_path, 23, 11, 4)
    command = COMMAND.replace(PYXIS_PLUGIN, str(plugin))
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "pyxis_slurm 23.11.4" in done.stdout.splitlines()
    assert read("gpu001", done.stdout).components()["pyxis_slurm"] == "23.11.4"


def test_without_the_plugin_there_is_no_pyxis_line(tmp_path: Path) -> None:
    command = COMMAND.replace(PYXIS_PLUGIN, str(tmp_path / "absent.so"))
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30)
    assert "pyxis_slurm" not in done.stdout


def test_pyxis_built_for_another_slurm_release_is_incompatible(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = lab_nodes()[:2]
    slurmd = "package slurmd 22.05.8-4+deb12u3"
    folder = capture(
        tmp_path,
        {
            # Built against 23.11 headers, run under 22.05: slurmd refuses it.
            first: (slurmd, f"{slurmd}\npyxis_slurm 23.11.4"),
            # Another micro release of 22.05: SPANK plugins match on major.minor only.
            second: (slurmd, f"{slurmd}\npyxis_slurm 22.05.2"),
        },
    )
    code, data = versions_json(folder, capsys)
    assert code == 1
    named = [(f["check"], f["node"], f["component"]) for f in data["findings"]]
    assert ("version.incompatible", first, "pyxis_slurm") in named
    assert not [n for n in named if n[1] == second and n[0] == "version.incompatible"]
    (finding,) = [f for f in data["findings"] if f["component"] == "pyxis_slurm"]
    assert "pyxis-built-for-slurm" in finding["message"]
