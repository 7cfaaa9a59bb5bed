"""Time `adopt` (parse the fabric, read it as cabled, write and load the draft) and what the
draft then costs (`spec check`'s load, `fabric check`) on a 1,024-node x 8-rail fabric against
a 64-node one, in one run, beside a spec by the rule of the same size.

Run: `.venv/bin/python benchmarks/adopt.py`. Prints each size's times and the time ratio next
to the node ratio (goal: linear). The fabric is the real tool's text with real-style switch
names (tests/unit/checks/fabric_text.py). Never a test assertion.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from cluster_tool.checks.fabric import check_fabric
from cluster_tool.fabric.plan import cabling_plan, switch_links
from cluster_tool.parsers.ibnetdiscover import parse_ibnetdiscover
from cluster_tool.spec.loader import load_spec_text
from cluster_tool.spec.models import builtin_profile
from cluster_tool.workflows.adopt import adopt
from tests.unit.checks.fabric_text import FabricText, real_style

REPO = Path(__file__).resolve().parent.parent


def rule_spec_text(nodes: int) -> str:
    data = yaml.safe_load((REPO / "examples" / "h200-4su.yml").read_text())
    data["management"]["network"] = "10.0.0.0/8"
    data["nodes"][2]["hosts"] = f"gpu[0001-{nodes:04d}]"
    data["nodes"][2]["address"] = "10.1.0.1"
    data["bmc"]["address_pattern"] = "{name}-bmc"
    sus = -(-nodes // 32)
    data["fabric"]["spines"] = 32 if sus > 4 else {1: 4, 2: 8}.get(sus, 16)
    data["fabric"]["spine_ports"] = max(64, sus * 8 * 32 // data["fabric"]["spines"])
    data["slurm"]["partitions"] = [{"name": "gpu", "default": True}]
    return yaml.safe_dump(data)


def measure(nodes: int, repeat: int = 3) -> dict[str, float]:
    rule_text = rule_spec_text(nodes)
    cluster = load_spec_text(rule_text, "rule.yml")
    rows, links = real_style(cabling_plan(cluster), switch_links(cluster))
    text = FabricText.from_plan(rows, links).text()
    times: dict[str, list[float]] = {"adopt": [], "load": [], "load_rule": [], "check": []}
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = adopt(
            text,
            source="bench",
            name="bench",
            profile_name="hgx-h200-8x-ndr",
            profile=builtin_profile("hgx-h200-8x-ndr"),
            profile_body=None,
            network="10.0.0.0/16",
        )
        t1 = time.perf_counter()
        draft = load_spec_text(result.text, "draft.yml")
        t2 = time.perf_counter()
        load_spec_text(rule_text, "rule.yml")
        t3 = time.perf_counter()
        findings = check_fabric(draft, parse_ibnetdiscover(text))
        t4 = time.perf_counter()
        assert findings == [], findings[:3]
        for key, value in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            value_list = times[key]
            value_list.append(value)
    out = {key: statistics.median(values) for key, values in times.items()}
    out["nodes"] = nodes
    out["draft_kib"] = len(result.text) / 1024
    return out


def main() -> int:
    small, large = measure(64), measure(1024)
    for r in (small, large):
        print(
            f"{r['nodes']:>5.0f} nodes: adopt {r['adopt']:.2f} s  draft {r['draft_kib']:.0f} KiB  "
            f"load draft {r['load']:.2f} s (rule spec {r['load_rule']:.2f} s)  "
            f"fabric check {r['check']:.2f} s"
        )
    ratio = large["nodes"] / small["nodes"]
    for key in ("adopt", "load", "check"):
        print(f"{key}: time x{large[key] / small[key]:.1f} for nodes x{ratio:.0f}")
    print(
        f"draft load against a rule spec of 1,024 nodes: x{large['load'] / large['load_rule']:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
