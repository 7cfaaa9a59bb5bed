"""Time the whole health collection over the lab's nodes against `clush` running one trivial
command on the same nodes, in one run.

Run (as root, with a lab up): `.venv/bin/python benchmarks/fanout.py [--repeat N]`. Uses the
lab named by CLUSTER_TOOL_LAB_DIR (default `<repo>/.lab`) and its ssh_config, so clush and
both of our transports reach the nodes the same way. Prints the median of each and the ratio
to clush (goal: within 1.1x), and our fan-out carrying one `true` probe, which separates the
SSH/script overhead from the probes' own run time on the nodes (in the lab the simulated
nvidia-smi & co. are Python and all nodes share this machine's CPUs). Never a test assertion.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cluster_tool.lab import lifecycle
from cluster_tool.lab.config import LabConfig
from cluster_tool.remote.fanout import (
    OpenSshTransport,
    ParamikoTransport,
    Target,
    Transport,
    collect,
)
from cluster_tool.remote.probes import FABRIC_PROBES, HEALTH_PROBES, Probe

PROBES = tuple(p for p in HEALTH_PROBES if p.name != "dcgmi-diag")


def timed(fn: object, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dcgm", action="store_true", help="include `dcgmi diag -r 1`")
    args = ap.parse_args()
    clush = shutil.which("clush") or str(Path(sys.executable).parent / "clush")
    config = LabConfig.from_env()
    status = lifecycle.status(config)
    nodes = [n.name for n in status.nodes]
    if not nodes:
        print(f"no lab running in {config.lab_dir}: `cluster-tool lab up` first")
        return 2
    gpu = [n.name for n in status.nodes if n.role == "gpu"]
    head = next((n.name for n in status.nodes if n.role == "head"), None)
    ssh_config = Path(status.ssh_config)
    probes = HEALTH_PROBES if args.dcgm else PROBES
    jobs = [(Target(n), probes) for n in gpu]
    if head:
        jobs.append((Target(head), FABRIC_PROBES))

    def run_clush() -> None:
        subprocess.run(
            [clush, "-w", ",".join(nodes), "-o", f"-F {ssh_config}", "true"],
            check=True,
            capture_output=True,
        )

    def run_ours(transport: Transport) -> None:
        results = collect(jobs, transport, concurrency=len(jobs))
        bad = [r.host for r in results.values() if not r.reachable]
        if bad:
            raise SystemExit(f"unreachable: {bad}")

    trivial = [(Target(n), (Probe("true", "true"),)) for n in nodes]

    def run_trivial() -> None:
        collect(trivial, OpenSshTransport(ssh_config), concurrency=len(trivial))

    run_clush()  # both sides start with the lab's SSH masters up
    baseline = statistics.median(timed(run_clush, args.repeat))
    fanout_only = statistics.median(timed(run_trivial, args.repeat))
    openssh = statistics.median(timed(lambda: run_ours(OpenSshTransport(ssh_config)), args.repeat))
    paramiko = statistics.median(
        timed(lambda: run_ours(ParamikoTransport(ssh_config)), args.repeat)
    )
    sample = collect([jobs[0]], OpenSshTransport(ssh_config))[jobs[0][0].name]
    simulated = [n for n, o in sample.outputs.items() if not o.not_installed]
    print(
        f"{len(nodes)} hosts ({len(gpu)} GPU nodes x {len(probes)} probes, "
        f"{head or 'no'} head x {len(FABRIC_PROBES)} fabric probes); median of {args.repeat}"
    )
    print(f"clush -w {len(nodes)} hosts true:      {baseline:.3f} s")
    print(
        f"our fan-out, one `true` probe:  {fanout_only:.3f} s  ({fanout_only / baseline:.2f}x "
        "clush: the SSH and script overhead alone)"
    )
    for name, took in (("OpenSSH", openssh), ("paramiko", paramiko)):
        print(f"health collection, {name:<9} {took:.3f} s  ({took / baseline:.2f}x clush)")
    print(f"probes answered on {jobs[0][0].name}: {', '.join(simulated) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
