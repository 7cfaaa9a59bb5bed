"""`validate` against the emulated cluster: the real ibnetdiscover/ibqueryerrors on the head
through the SSH fan-out; cable faults made in ibsim are named with the right id, node and
component and are gone once healed. The health part needs the converged lab (simulator
packages installed by the roles) and `lab inject`; those tests say so when it is missing.
"""

from __future__ import annotations

import json
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.lab.conftest import Converged, LabHandle

CLI = [str(REPO / ".venv" / "bin" / "cluster-tool")]


def validate(lab: LabHandle, *args: str, timeout: float = 300) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [
            *CLI,
            "validate",
            "--spec",
            str(lab.spec),
            "--ssh-config",
            str(lab.ssh_config),
            "--json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def errors(report: dict[str, Any]) -> list[tuple[str, str | None, str | None]]:
    return [
        (f["check"], f["node"], f["component"])
        for f in report["findings"]
        if f["severity"] == "error"
    ]


def until(
    lab: LabHandle, args: tuple[str, ...], done: Callable[[dict[str, Any]], bool], wait: float = 45
) -> tuple[int, dict[str, Any]]:
    """Validate until `done` holds (ibsim re-cabling shows after a moment), or give up."""
    deadline = time.monotonic() + wait
    while True:
        rc, report = validate(lab, *args)
        if done(report) or time.monotonic() > deadline:
            return rc, report
        time.sleep(2)


FABRIC = ("--fabric",)


@pytest.fixture
def clean_fabric(lab: LabHandle) -> Iterator[LabHandle]:
    rc, report = until(lab, FABRIC, lambda r: not errors(r))
    assert (rc, errors(report)) == (0, []), report
    yield lab


def recable(lab: LabHandle, moves: list[tuple[str, str, int]]) -> None:
    """Unplug each HCA and plug it into (leaf, port); `restore` puts them back."""
    for hca, _, _ in moves:
        lab.ibsim(f'Unlink "{hca}"[1]')
    for hca, leaf, port in moves:
        lab.ibsim(f'Link "{hca}"[1] "{leaf}"[{port}]')


def restore(lab: LabHandle, planned: dict[str, tuple[str, int]]) -> None:
    for hca in planned:
        lab.ibsim(f'Unlink "{hca}"[1]')
    for hca, (leaf, port) in planned.items():
        lab.ibsim(f'Link "{hca}"[1] "{leaf}"[{port}]')


def test_a_healthy_lab_fabric_validates_clean(clean_fabric: LabHandle) -> None:
    rc, report = validate(clean_fabric, *FABRIC)
    assert rc == 0 and report["status"] == "pass"
    assert report["summary"]["fabric_host"] == "head"


def test_a_cable_swap_is_one_finding_naming_both_hcas(clean_fabric: LabHandle) -> None:
    lab = clean_fabric
    planned = {"gpu003 mlx5_0": ("su1-leaf-r0", 3), "gpu003 mlx5_3": ("su1-leaf-r1", 3)}
    recable(lab, [("gpu003 mlx5_0", "su1-leaf-r1", 3), ("gpu003 mlx5_3", "su1-leaf-r0", 3)])
    try:
        rc, report = until(lab, FABRIC, lambda r: bool(errors(r)))
        assert rc == 1
        assert errors(report) == [("fabric.swapped", "gpu003", "mlx5_0,mlx5_3")]
        message = report["findings"][0]["message"]
        assert (
            "gpu003 mlx5_3 is cabled to su1-leaf-r0 port 3; expected su1-leaf-r1 port 3" in message
        )
    finally:
        restore(lab, planned)
    rc, report = until(lab, FABRIC, lambda r: not errors(r))
    assert (rc, errors(report)) == (0, [])


def test_wrong_rail_and_wrong_port(clean_fabric: LabHandle) -> None:
    lab = clean_fabric
    planned = {"gpu001 mlx5_4": ("su1-leaf-r2", 1), "gpu002 mlx5_5": ("su1-leaf-r3", 2)}
    # A lab leaf has 4 down-ports and 4 uplinks (5-8) of its 40: 37 and 38 are free.
    recable(lab, [("gpu001 mlx5_4", "su1-leaf-r5", 37), ("gpu002 mlx5_5", "su1-leaf-r3", 38)])
    try:
        rc, report = until(lab, FABRIC, lambda r: len(errors(r)) >= 2)
        assert rc == 1
        assert sorted(errors(report)) == [
            ("fabric.wrong-port", "gpu002", "mlx5_5"),
            ("fabric.wrong-rail", "gpu001", "mlx5_4"),
        ]
    finally:
        restore(lab, planned)
    rc, report = until(lab, FABRIC, lambda r: not errors(r))
    assert (rc, errors(report)) == (0, [])


def test_a_cut_cable_is_link_down_and_a_cut_uplink_is_fabric_spine(clean_fabric: LabHandle) -> None:
    lab = clean_fabric
    lab.ibsim('Unlink "gpu002 mlx5_3"[1]')
    lab.ibsim('Unlink "su1-leaf-r6"[5]')
    try:
        rc, report = until(lab, FABRIC, lambda r: len(errors(r)) >= 2)
        assert rc == 1
        assert sorted(errors(report)) == [
            ("fabric.link-down", "gpu002", "mlx5_3"),
            ("fabric.spine", None, "su1-leaf-r6"),
        ]
    finally:
        lab.ibsim('ReLink "gpu002 mlx5_3"[1]')
        lab.ibsim('ReLink "su1-leaf-r6"[5]')
    rc, report = until(lab, FABRIC, lambda r: not errors(r))
    assert (rc, errors(report)) == (0, [])


def test_port_errors_over_the_spec_threshold_are_fabric_errors(clean_fabric: LabHandle) -> None:
    lab = clean_fabric
    lab.ibsim('PerformanceSet "gpu004 mlx5_9"[1] PortCounters.SymbolErrorCounter=500')
    try:
        rc, report = until(lab, FABRIC, lambda r: bool(errors(r)))
        assert rc == 1
        assert errors(report) == [("fabric.errors", "gpu004", "mlx5_9")]
        assert "SymbolErrorCounter 500 > 10" in report["findings"][0]["message"]
    finally:
        lab.ibsim('PerformanceSet "gpu004 mlx5_9"[1] PortCounters.SymbolErrorCounter=0')
    rc, report = until(lab, FABRIC, lambda r: not errors(r))
    assert (rc, errors(report)) == (0, [])


def test_save_then_replay_gives_the_same_report(clean_fabric: LabHandle, tmp_path: Path) -> None:
    lab = clean_fabric
    rc, live = validate(lab, *FABRIC, "--save", str(tmp_path / "cap"))
    assert (tmp_path / "cap" / "head" / "ibnetdiscover.out").is_file()
    rc2, replayed = validate(lab, *FABRIC, "--from", str(tmp_path / "cap"))
    assert (rc, live["findings"]) == (rc2, replayed["findings"])


def test_an_unreachable_node_is_a_finding_and_exit_3(lab: LabHandle, tmp_path: Path) -> None:
    spec = tmp_path / "lab-with-ghost.yml"
    text = lab.spec.read_text().replace("gpu[001-004]", "gpu[001-005]")
    spec.write_text(text)
    proc = subprocess.run(
        [*CLI, "validate", "--spec", str(spec), "--ssh-config", str(lab.ssh_config), "--health",
         "--nodes", "gpu005", "--no-dcgm", "--json", "--junit", str(tmp_path / "junit.xml")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    report = json.loads(proc.stdout)
    assert [(f["check"], f["node"]) for f in report["findings"]] == [("os.unreachable", "gpu005")]
    # Its checks never ran: JUnit says skipped, with why; none of them is a pass.
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite[@name='gpu005']")
    assert suite is not None
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["os.unreachable"].find("failure") is not None
    ran = [n for n, c in cases.items() if c.find("failure") is None and c.find("skipped") is None]
    assert ran == [], f"reported as passed though they never ran: {ran}"
    skipped = cases["gpu.ecc"].find("skipped")
    assert skipped is not None and "unreachable" in (skipped.get("message") or "")


# --- health: needs the converged lab and `lab inject` ---------------------------------------


@pytest.fixture
def converged_lab(converged: Converged) -> LabHandle:
    """The session's converged lab (one bring-up from bare nodes, shared; see conftest.py)."""
    return converged.lab


def lab_cli(lab: LabHandle, *args: str) -> dict[str, Any]:
    env_dir = str(lab.config.lab_dir)  # type: ignore[attr-defined]
    proc = subprocess.run(
        [*CLI, "lab", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"CLUSTER_TOOL_LAB_DIR": env_dir, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if proc.stdout.strip() else {}


HEALTH = ("--health", "--no-dcgm")


@pytest.mark.converged
def test_a_healthy_converged_lab_validates_with_no_error(converged_lab: LabHandle) -> None:
    rc, report = validate(converged_lab, "--health", "--fabric")
    assert errors(report) == [] and rc == 0


# Each fault on a GPU or port of its own, so that one validation must name every one of them (one
# run instead of one per fault: the lab's suite has a time budget).
NODE_FAULTS = [
    (("gpu-ecc", "gpu002", "3"), ("gpu.ecc", "gpu002", "GPU3")),
    (("gpu-xid", "gpu003", "5", "79"), ("gpu.xid", "gpu003", "GPU5")),
    (("gpu-hot", "gpu001", "2", "95"), ("gpu.temperature", "gpu001", "GPU2")),
    (("gpu-missing", "gpu004", "6"), ("gpu.count", "gpu004", None)),
    (("link-down", "gpu002", "mlx5_4"), ("ib.state", "gpu002", "mlx5_4")),
    # Issue 20: mlxlink, nvidia-smi nvlink -e and lspci, simulated in the nodes.
    (("link-ber", "gpu003", "mlx5_5", "1e-3"), ("link.fec", "gpu003", "mlx5_5")),
    (("nvlink-errors", "gpu001", "4"), ("gpu.nvlink-errors", "gpu001", "GPU4 link 0")),
    (("pcie-width", "gpu002", "mlx5_9", "8"), ("ib.pcie", "gpu002", "mlx5_9")),
    (("gpu-clock", "gpu004", "3", "1200"), ("gpu.clocks", "gpu004", "GPU3")),
]


@pytest.mark.converged
def test_every_injected_node_fault_is_found_and_heals(converged_lab: LabHandle) -> None:
    lab = converged_lab
    expected = {finding for _, finding in NODE_FAULTS}
    records = []
    try:
        for fault, _ in NODE_FAULTS:
            records.append(lab_cli(lab, "inject", *fault))
        rc, report = until(lab, HEALTH, lambda r: expected <= set(errors(r)))
        missing = expected - set(errors(report))
        assert rc == 1 and not missing, (sorted(missing, key=str), errors(report))
    finally:
        for record in records:
            lab_cli(lab, "heal", str(record["id"]))
    rc, report = until(lab, HEALTH, lambda r: not errors(r))
    assert (rc, errors(report)) == (0, [])


# What `cluster-tool` needs on a node, copied from this checkout's virtualenv (the lab's nodes
# run the same Debian and Python as this machine): the package and its imports.
_RUNTIME = (
    "ClusterShell",
    "annotated_doc",
    "annotated_types",
    "click",
    "jinja2",
    "markupsafe",
    "pydantic",
    "pydantic_core",
    "rich",
    "pygments",
    "markdown_it",
    "mdurl",
    "shellingham",
    "typer",
    "typing_extensions.py",
    "typing_inspection",
    "yaml",
)


def install_cluster_tool(lab: LabHandle, node: str) -> None:
    """cluster-tool under /opt/cluster-tool with a /usr/local/bin wrapper, and the node file."""
    import sys
    import tarfile
    from io import BytesIO

    site = next(Path(p) for p in sys.path if p.endswith("site-packages"))
    buf = BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(REPO / "cluster_tool", arcname="cluster_tool")
        for name in _RUNTIME:
            if (site / name).exists():
                tar.add(site / name, arcname=name)
    wrapper = '#!/bin/sh\nPYTHONPATH=/opt/cluster-tool exec python3 -m cluster_tool "$@"\n'
    script = (
        "mkdir -p /opt/cluster-tool /etc/cluster-tool && tar -xzf - -C /opt/cluster-tool && "
        f"printf '%s' '{wrapper}' > /usr/local/bin/cluster-tool && "
        "chmod 755 /usr/local/bin/cluster-tool"
    )
    done = subprocess.run(
        ["ssh", "-F", str(lab.ssh_config), node, script],
        input=buf.getvalue(),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    node_file = subprocess.run(
        [*CLI, "node-file", "--spec", str(lab.spec), node],
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout
    done = subprocess.run(
        ["ssh", "-F", str(lab.ssh_config), node, "cat > /etc/cluster-tool/node.json"],
        input=node_file,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def sinfo(lab: LabHandle, node: str) -> str:
    return lab.ssh("head", f"sinfo -h -N -n {node} -o '%T|%E'").stdout.strip()


@pytest.mark.converged
def test_node_check_drains_and_resumes_through_slurm(converged_lab: LabHandle) -> None:
    lab = converged_lab
    if lab.ssh("head", "command -v sinfo").returncode:
        pytest.skip("Slurm is not installed in the lab")
    install_cluster_tool(lab, "gpu002")
    assert lab.ssh("gpu002", "cluster-tool node-check --slurm").returncode == 0, "unhealthy start"
    record = lab_cli(lab, "inject", "gpu-ecc", "gpu002", "3")
    try:
        check = lab.ssh("gpu002", "cluster-tool node-check --slurm")
        assert check.returncode == 1, check.stdout + check.stderr
        state = sinfo(lab, "gpu002")
        assert state.startswith("drained|cluster-tool: gpu.ecc GPU3 volatile uncorrectable 1"), (
            state
        )
        # A double-bit error also logs Xid 48: the reason names it, with the row remap and reset.
        assert "gpu.xid" in state, state
    finally:
        lab_cli(lab, "heal", str(record.get("id", "--all")))
    # Clean again, but the drain names an Xid, which a later reading cannot re-prove (the line
    # may have rotated out of the log, or the node rebooted): node-check keeps it for a person.
    kept = lab.ssh("gpu002", "cluster-tool node-check --slurm --json")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    action = json.loads(kept.stdout)["slurm"]
    assert action["action"] == "kept" and "gpu.xid" in action["why"], action
    assert sinfo(lab, "gpu002") == state
    lab.ssh("head", "scontrol update nodename=gpu002 state=resume")
    # A state a fresh reading re-proves (an application clock set below its default): healthy
    # again, node-check lifts its own drain.
    record = lab_cli(lab, "inject", "gpu-clock", "gpu002", "3", "1200")
    try:
        check = lab.ssh("gpu002", "cluster-tool node-check --slurm")
        assert check.returncode == 1, check.stdout + check.stderr
        assert sinfo(lab, "gpu002").startswith("drained|cluster-tool: gpu.clocks GPU3"), sinfo(
            lab, "gpu002"
        )
    finally:
        lab_cli(lab, "heal", str(record.get("id", "--all")))
    assert lab.ssh("gpu002", "cluster-tool node-check --slurm").returncode == 0
    # (sinfo's `*` suffix: slurmd slow to answer on a busy lab machine, not a drain)
    assert sinfo(lab, "gpu002").split("|")[0].rstrip("*~#!%$@^-") in ("idle", "mixed", "allocated")
    # An admin's drain is never lifted by node-check.
    lab.ssh("head", "scontrol update nodename=gpu002 state=drain reason='swapping a PSU'")
    try:
        assert lab.ssh("gpu002", "cluster-tool node-check --slurm").returncode == 0
        state, reason = sinfo(lab, "gpu002").split("|", 1)
        assert (state.rstrip("*~#!%$@^-"), reason) == ("drained", "swapping a PSU")
    finally:
        lab.ssh("head", "scontrol update nodename=gpu002 state=resume")
