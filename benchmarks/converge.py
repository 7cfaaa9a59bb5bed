"""Converge the lab with site.yml twice and print first-run vs no-op-run wall time side by side.

Usage: .venv/bin/python benchmarks/converge.py [--fresh] [--inventory DIR] [-e KEY=VALUE ...]
`--fresh` re-creates the lab first (`cluster-tool lab down` + `lab up`) so the first run starts
from bare nodes. The goal: the second (no-change) run takes under 15% of the first.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from cluster_tool.ansible import PlaybookResult, run_playbook

REPO = Path(__file__).resolve().parents[1]


def _lab_inventory() -> Path:
    lab_dir = Path(os.environ.get("CLUSTER_TOOL_LAB_DIR", REPO / ".lab"))
    return lab_dir / "inventory"


def _summary(label: str, result: PlaybookResult) -> str:
    failed = ",".join(result.failed_hosts + result.unreachable_hosts) or "-"
    return (
        f"{label:<12} {result.wall_s:8.1f} s  changed={result.changed_total:<4} "
        f"hosts={len(result.hosts):<3} failed={failed}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", type=Path, help="inventory (default: the lab's)")
    parser.add_argument("--playbook", type=Path, default=REPO / "playbooks" / "site.yml")
    parser.add_argument("--fresh", action="store_true", help="re-create the lab first")
    parser.add_argument("-e", dest="extra", action="append", default=[], help="KEY=VALUE")
    args = parser.parse_args()

    cli = [str(Path(sys.executable).parent / "cluster-tool"), "lab"]
    if args.fresh:
        subprocess.run([*cli, "down"], check=True, cwd=REPO)
        subprocess.run([*cli, "up"], check=True, cwd=REPO)
    inventory = args.inventory or _lab_inventory()
    extravars = dict(item.split("=", 1) for item in args.extra)

    first = run_playbook(args.playbook, inventory, extravars=extravars)
    second = run_playbook(args.playbook, inventory, extravars=extravars)

    print(_summary("first run", first))
    print(_summary("second run", second))
    ratio = second.wall_s / first.wall_s if first.wall_s else float("nan")
    verdict = "meets" if ratio < 0.15 else "misses"
    print(f"no-op / first = {ratio:.2f} ({verdict} the goal of < 0.15)")
    if second.changed_total:
        print(f"second run changed something on: {', '.join(second.changed_hosts)}")
    return 0 if first.succeeded and second.succeeded and second.changed_total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
