"""Time the whole health collection over the lab's nodes against `clush` running one trivial
command on the same nodes, in one run.

Run (as root, with a lab up): `.venv/bin/python benchmarks/fanout.py [--repeat N]`. Uses the
lab named by CLUSTER_TOOL_LAB_DIR (default `<repo>/.lab`) and its ssh_config, so clush and
both of our transports reach the nodes the same way. Measures twice: warm (the lab's SSH
masters up, so both sides pay almost no handshake) and cold (ControlMaster off: a handshake
per host, what a one-off `validate` or `clush` from an operator's shell pays). Prints the
median of each and the ratio to clush (goal: within 1.1x), and our fan-out carrying one `true`
probe, which separates the SSH/script overhead from the probes' own run time on the nodes (in
the lab the simulated nvidia-smi & co. are Python, ~35 ms each, and all nodes share this
machine's CPUs; `benchmarks/lab_sim.py` times them). Never a test assertion.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
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

    def measure(config_file: Path) -> dict[str, float]:
        def run_clush() -> None:
            subprocess.run(
                [clush, "-w", ",".join(nodes), "-o", f"-F {config_file}", "true"],
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
            collect(trivial, OpenSshTransport(config_file), concurrency=len(trivial))

        run_clush()  # one unmeasured round first (warm: it leaves the SSH masters up)
        return {
            "clush": statistics.median(timed(run_clush, args.repeat)),
            "true": statistics.median(timed(run_trivial, args.repeat)),
            "OpenSSH": statistics.median(
                timed(lambda: run_ours(OpenSshTransport(config_file)), args.repeat)
            ),
            "paramiko": statistics.median(
                timed(lambda: run_ours(ParamikoTransport(config_file)), args.repeat)
            ),
        }

    with tempfile.TemporaryDirectory() as tmp:
        # Cold: what a one-off `validate` or `clush` from an operator's shell meets, a fresh
        # SSH handshake per host (the lab's ssh_config less its ControlMaster lines).
        cold_config = Path(tmp) / "ssh_config"
        cold_config.write_text(
            "".join(
                line
                for line in ssh_config.read_text().splitlines(keepends=True)
                if not line.strip()
                .lower()
                .startswith(("controlmaster", "controlpath", "controlpersist"))
            )
        )
        measured = {
            "warm (SSH masters up)": measure(ssh_config),
            "cold (a handshake per host)": measure(cold_config),
        }

    sample = collect([jobs[0]], OpenSshTransport(ssh_config))[jobs[0][0].name]
    simulated = [n for n, o in sample.outputs.items() if not o.not_installed]
    print(
        f"{len(nodes)} hosts ({len(gpu)} GPU nodes x {len(probes)} probes, "
        f"{head or 'no'} head x {len(FABRIC_PROBES)} fabric probes); median of {args.repeat}"
    )
    for label, took in measured.items():
        base = took["clush"]
        print(f"-- {label}")
        print(f"clush -w {len(nodes)} hosts true:      {base:.3f} s")
        print(
            f"our fan-out, one `true` probe:  {took['true']:.3f} s  ({took['true'] / base:.2f}x "
            "clush: the SSH and script overhead alone)"
        )
        for name in ("OpenSSH", "paramiko"):
            print(
                f"health collection, {name:<9} {took[name]:.3f} s  ({took[name] / base:.2f}x clush)"
            )
    print(
        f"probes answered on {jobs[0][0].name}: {', '.join(simulated) or 'none'} "
        f"(slowest of them on the node: {sample.elapsed_s:.3f} s with the SSH round trip)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
