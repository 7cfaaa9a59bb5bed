"""Time the wiring check (parse `ibnetdiscover` + check against the plan) on a 1,024-node x
8-HCA fabric against a 32-node one, in one run.

Run: `.venv/bin/python benchmarks/fabric.py`. Prints each size's parse and check times, the
time ratio next to the node ratio (goal: linear), and whether 1,024 nodes stay under 2 s.
The fabric text is the real tool's format, built from each spec's own cabling plan, with one
cable swapped so the check has something to find. Never a test assertion.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from cluster_tool.checks.fabric import check_fabric
from cluster_tool.fabric.plan import cabling_plan, plan_for, switch_links
from cluster_tool.parsers.ibnetdiscover import parse_ibnetdiscover
from cluster_tool.spec.loader import load_spec_text
from tests.unit.checks.fabric_text import FabricText

REPO = Path(__file__).resolve().parent.parent


def spec_with(nodes: int) -> Any:
    """examples/h200-4su.yml grown (or shrunk) to `nodes` GPU nodes, 32 per SU."""
    data = yaml.safe_load((REPO / "examples" / "h200-4su.yml").read_text())
    data["management"]["network"] = "10.0.0.0/8"
    data["nodes"][2]["hosts"] = f"gpu[0001-{nodes:04d}]"
    data["nodes"][2]["address"] = "10.1.0.1"
    data["bmc"]["address_pattern"] = "{name}-bmc"
    sus = -(-nodes // 32)
    leaves = sus * 8
    # Two tiers stay non-blocking past 4 SUs with director-class spines: 32 of them, each
    # with a port for every leaf's uplink to it.
    data["fabric"]["spines"] = 32 if sus > 4 else {1: 4, 2: 8}.get(sus, 16)
    data["fabric"]["spine_ports"] = max(64, leaves * 32 // data["fabric"]["spines"])
    data["slurm"]["partitions"] = [{"name": "gpu", "default": True}]
    return load_spec_text(yaml.safe_dump(data), "bench.yml")


def measure(nodes: int, repeat: int = 3) -> dict[str, float]:
    cluster = spec_with(nodes)
    rows, links = cabling_plan(cluster), switch_links(cluster)
    fabric = FabricText.from_plan(rows, links)
    fabric.swap(rows[8 * 5].node, rows[8 * 5 + 1].hca, rows[8 * 5 + 2].hca)
    text = fabric.text()
    plan = plan_for(cluster, rows, links)
    parse_times, check_times = [], []
    findings: list[Any] = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        discovered = parse_ibnetdiscover(text)
        t1 = time.perf_counter()
        findings = check_fabric(cluster, discovered, plan=plan)
        t2 = time.perf_counter()
        parse_times.append(t1 - t0)
        check_times.append(t2 - t1)
    assert [f.check for f in findings] == ["fabric.swapped"], findings
    parse_s, check_s = statistics.median(parse_times), statistics.median(check_times)
    return {
        "nodes": nodes,
        "lines": text.count("\n"),
        "parse_s": parse_s,
        "check_s": check_s,
        "total_s": parse_s + check_s,
    }


def main() -> int:
    small, large = measure(32), measure(1024)
    for r in (small, large):
        print(
            f"{r['nodes']:>5} nodes x 8 HCAs: {r['lines']:>7} lines  parse {r['parse_s']:.3f} s  "
            f"check {r['check_s']:.3f} s  total {r['total_s']:.3f} s"
        )
    ratio = large["total_s"] / small["total_s"]
    print(f"time ratio 1024/32: {ratio:.1f}x for a node ratio of 32x (linear: about 32x)")
    print(
        f"1,024 nodes: {large['total_s']:.2f} s "
        f"({'under' if large['total_s'] < 2 else 'OVER'} the 2 s goal)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
