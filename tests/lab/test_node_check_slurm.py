"""Slurm's HealthCheckProgram, Prolog and Epilog run cluster-tool on the node (issue 18 finding
10, issue 22): the cluster_tool_node role installed it and the node file, slurmd runs the slurm
role's wrapper every HealthCheckInterval, and a fault injected on an idle node drains it within
one interval with the finding id in the reason; healed, the next run resumes it (an application
clock set below its default: a state node-check reads afresh). The prolog script refuses the
faulted node; the epilog script drains for an Xid that came during a job, with a reason
node-check leaves alone. A drain that `node-check --slurm --dcgm` wrote for a double-bit ECC
error (DCGM fails it; the driver logs Xid 48) survives the next periodic check, which runs
without DCGM, and the next clean `--dcgm` run too: an Xid is not re-proven by a later reading
(issue 30, item 4); the operator lifts it.

The lab's spec leaves the periodic check off (other lab tests inject faults on idle nodes for
their own tools to find); this test turns it on every 15 s on idle nodes, as the slurm role renders
it from the spec's slurm.health_check_interval, through `scontrol reconfigure`, and puts the
converged slurm.conf back afterwards, byte for byte, so the second converge still changes nothing.
Costs about two health-check intervals and a few node-check runs.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from tests.conftest import REPO
from tests.lab.conftest import Converged

pytestmark = pytest.mark.converged

NODE = "gpu003"


def _wait(what: str, until: Callable[[], bool], limit_s: float) -> float:
    """Seconds until `until()` held; fails the test past `limit_s`."""
    start = time.monotonic()
    while not until():
        assert time.monotonic() - start < limit_s, f"{what}: not within {limit_s:.0f} s"
        time.sleep(0.5)
    return time.monotonic() - start


SLURM_CONF = "/etc/slurm/slurm.conf"
HOSTS = ("head", "gpu001", "gpu002", "gpu003", "gpu004")
# What the slurm role renders for slurm.health_check_interval: 15 and health_check_node_state: IDLE.
HEALTH_CHECK = (
    "HealthCheckProgram=/usr/local/sbin/cluster-tool-healthcheck",
    "HealthCheckInterval=15",
    "HealthCheckNodeState=IDLE",
)


@pytest.fixture
def health_check_on(converged: Converged) -> Iterator[None]:
    """The periodic health check on every node for one test; the converged file back after."""
    lab = converged.lab
    lines = "\\n".join(HEALTH_CHECK)
    try:
        for host in HOSTS:
            out = lab.ssh(
                host,
                f"grep -q '^HealthCheck' {SLURM_CONF} && exit 3; cp -p {SLURM_CONF} "
                f"{SLURM_CONF}.converged && printf '{lines}\\n' >> {SLURM_CONF}",
            )
            assert out.returncode == 0, (host, out.returncode, out.stderr)
        assert lab.ssh("head", "scontrol reconfigure").returncode == 0
        yield
    finally:
        for host in HOSTS:
            saved = f"{SLURM_CONF}.converged"
            lab.ssh(host, f"if [ -e {saved} ]; then mv -f {saved} {SLURM_CONF}; fi")
        lab.ssh("head", "scontrol reconfigure")


def test_healthcheckprogram_drains_a_faulted_node_within_one_interval_and_resumes_it(
    converged: Converged, health_check_on: None
) -> None:
    lab = converged.lab
    config = lab.ssh("head", "scontrol show config").stdout
    found = re.search(r"^HealthCheckInterval\s*=\s*(\d+)", config, re.MULTILINE)
    assert found, config
    interval = int(found[1])
    assert re.search(r"^HealthCheckProgram\s*=\s*/usr/local/sbin/cluster-tool-healthcheck$",
                     config, re.MULTILINE), config  # fmt: skip
    installed = lab.ssh(
        NODE, "readlink -f /usr/local/bin/cluster-tool; stat -c %a /etc/cluster-tool/node.json"
    )
    assert installed.returncode == 0, installed.stderr
    assert installed.stdout.split()[0].startswith("/opt/cluster-tool/venvs/")
    assert installed.stdout.split()[1] == "644"

    sys.path.insert(0, str(REPO / "benchmarks"))
    from node_check import time_on_node  # benchmarks/node_check.py

    rc, took = time_on_node(lab.ssh_config, NODE, "/usr/local/sbin/cluster-tool-healthcheck")
    print(f"\nHealthCheckProgram on a healthy {NODE}: exit {rc}, {took:.2f} s", file=sys.stderr)
    assert converged.sinfo()[NODE][0] in ("idle", "mixed"), converged.sinfo()[NODE]

    # The role's check runs from slurmd: nothing here calls node-check for the drain or the resume.
    fault = converged.inject("gpu-clock", NODE, "3", "1200")
    try:
        drained = _wait(
            "HealthCheckProgram drained the node",
            lambda: converged.sinfo()[NODE][1].startswith("cluster-tool: gpu.clocks GPU3"),
            interval + 20,
        )
        state, reason = converged.sinfo()[NODE]
        assert state in ("drained", "draining"), (state, reason)
        # The prolog refuses the node (exit 1: Slurm requeues the job) and keeps the drain's reason.
        prolog = lab.ssh(NODE, "SLURM_JOB_ID=900001 /usr/local/sbin/cluster-tool-prolog")
        assert prolog.returncode == 1, prolog.stdout + prolog.stderr
        assert converged.sinfo()[NODE][1] == reason
    finally:
        converged.heal(fault)
    resumed = _wait(
        "the next HealthCheckProgram run resumed the node",
        lambda: converged.sinfo()[NODE][0] in ("idle", "mixed"),
        interval + 20,
    )
    print(f"drained after {drained:.1f} s, resumed {resumed:.1f} s after the heal "
          f"(HealthCheckInterval {interval} s)", file=sys.stderr)  # fmt: skip

    # A job's prolog keeps its baseline; an Xid that comes during the job drains at its epilog,
    # with the epilog's reason, which the health check does not lift once the fault is gone.
    job = "900002"
    prolog = lab.ssh(NODE, f"SLURM_JOB_ID={job} /usr/local/sbin/cluster-tool-prolog")
    assert prolog.returncode == 0, prolog.stdout + prolog.stderr
    fault = converged.inject("gpu-xid", NODE, "5", "79")
    try:
        epilog = lab.ssh(NODE, f"SLURM_JOB_ID={job} /usr/local/sbin/cluster-tool-epilog")
        assert epilog.returncode == 0, epilog.stdout + epilog.stderr
        state, reason = converged.sinfo()[NODE]
        assert state in ("drained", "draining"), (state, reason)
        assert reason.startswith("cluster-tool epilog: gpu.xid") and "79" in reason, reason
    finally:
        converged.heal(fault)
    try:
        check = lab.ssh(NODE, "/usr/local/sbin/cluster-tool-healthcheck")
        assert check.returncode == 0, check.stdout + check.stderr
        assert converged.sinfo()[NODE][1] == reason
    finally:
        lab.ssh("head", f"scontrol update nodename={NODE} state=resume")

    # A drain the deep check wrote (`node-check --slurm --dcgm`, as a site runs it from a
    # maintenance job) for a double-bit error: DCGM fails it and the driver logs Xid 48. The
    # periodic check, which runs without DCGM, keeps it; so does the next deep check, clean: an
    # Xid is evidence a later reading cannot re-prove. The operator lifts it.
    deep = "/usr/local/bin/cluster-tool node-check --slurm --dcgm --json"
    fault = converged.inject("gpu-ecc", NODE, "2")
    try:
        out = lab.ssh(NODE, deep)
        assert out.returncode == 1, out.stdout + out.stderr
        state, reason = converged.sinfo()[NODE]
        assert state in ("drained", "draining"), (state, reason)
        assert reason.startswith("cluster-tool: gpu.ecc GPU2"), reason
        assert "gpu.dcgm" in reason and "gpu.xid" in reason, reason
    finally:
        converged.heal(fault)
    try:
        check = lab.ssh(NODE, "/usr/local/sbin/cluster-tool-healthcheck")
        assert check.returncode == 0, check.stdout + check.stderr
        assert converged.sinfo()[NODE] == (state, reason), "the periodic check lifted it"
        again = lab.ssh(NODE, deep)
        assert again.returncode == 0, again.stdout + again.stderr
        action = json.loads(again.stdout)["slurm"]
        assert action["action"] == "kept" and "gpu.xid" in action["why"], action
        assert converged.sinfo()[NODE] == (state, reason), "the deep check lifted an Xid's drain"
    finally:
        lab.ssh("head", f"scontrol update nodename={NODE} state=resume")
