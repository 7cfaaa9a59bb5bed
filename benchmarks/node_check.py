"""How long `cluster-tool node-check --slurm` takes on a node: Slurm's HealthCheckProgram kills it
at 60 s, and issue 22 asks for <= 10 s.

Run against a lab (or any node the cluster_tool_node role installed), e.g. as root:
`.venv/bin/python benchmarks/node_check.py --ssh-config /tmp/cluster-tool-lab-ctc/ssh_config
gpu001`. Times each run on the node itself (`date +%s.%N` around the command, so SSH set-up is
not counted), on a healthy node, where node-check reads its Slurm state once and changes
nothing. Also times the prolog's fast checks (--prolog) when asked. Prints the figures; asserts
nothing.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

GOAL_S = 10.0
SLURM_LIMIT_S = 60.0

# Braced: the prolog's command is two commands, and both must be silenced and timed.
_TIMED = (
    'a=$(date +%s.%N); {{ {command}; }} >/dev/null 2>&1; rc=$?; b=$(date +%s.%N); echo "$rc $a $b"'
)


def time_on_node(ssh_config: Path, node: str, command: str) -> tuple[int, float]:
    """(exit status, seconds) of one run of `command` on `node`, timed on the node."""
    done = subprocess.run(
        ["ssh", "-F", str(ssh_config), node, _TIMED.format(command=command)],
        capture_output=True,
        text=True,
        timeout=SLURM_LIMIT_S + 30,
        check=False,
    )
    fields = done.stdout.split()
    if done.returncode != 0 or len(fields) != 3:
        raise RuntimeError(f"{node}: {command}: {done.stderr.strip() or done.stdout.strip()}")
    return int(fields[0]), float(fields[2]) - float(fields[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ssh-config", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--prolog", action="store_true", help="also time node-check --prolog")
    parser.add_argument("node")
    args = parser.parse_args(argv)
    commands = {"node-check --slurm": "cluster-tool node-check --slurm"}
    if args.prolog:
        commands["node-check --prolog"] = (
            "SLURM_JOB_ID=4242 cluster-tool node-check --prolog; "
            "rm -f /run/cluster-tool/jobs/4242.json"
        )
    for name, command in commands.items():
        runs = [time_on_node(args.ssh_config, args.node, command) for _ in range(args.runs)]
        times = [t for _, t in runs]
        codes = sorted({rc for rc, _ in runs})
        print(
            f"{name} on {args.node}: median {statistics.median(times):.2f} s, "
            f"max {max(times):.2f} s over {len(times)} runs (exit {codes}); "
            f"goal <= {GOAL_S:g} s, Slurm kills HealthCheckProgram at {SLURM_LIMIT_S:g} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
