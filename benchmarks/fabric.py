"""CPU and memory of the wiring check (`fabric check`) at 256, 1,024 and 4,096 nodes x 8 HCAs,
measured side by side in one run, with the growth of the cost per node.

Each fleet is examples/h200-4su.yml widened to N GPU nodes (32 per SU, 8 rails: a
rail-optimised two-tier fat tree, director-class spines past 4 SUs); its fabric is the real
`ibnetdiscover` format (both cable ends, GUIDs, LIDs, `4xNDR`) printed from the spec's own
cabling plan by tests/unit/checks/fabric_text.py, with two HCAs of one node swapped so the check
has something to find. In process, each phase is timed as `fabric check` runs it: the spec
loaded, the text parsed, the plan derived, the findings judged (process CPU per node, the best
of `--repeat` samples, the sizes taking turns); the peak memory of one pass is tracemalloc's
(the input text is allocated before and not counted). Then the command itself runs once per
size in a child (`cluster-tool fabric check --spec ... --ibnetdiscover ...`): its CPU and
peak RSS from wait4, next to `cluster-tool --version`'s (what start-up alone costs).

Goals (issue 35): at 4,096 nodes under 1 s of CPU and 100 MB; the time per node at 4,096 at
most 1.3x that at 256. Exits 1 when the growth passes `--limit`. Never a test assertion.
Run: `.venv/bin/python benchmarks/fabric.py [--sizes 256 1024 4096] [--repeat 3]`.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from cluster_tool.checks.fabric import fabric_findings
from cluster_tool.fabric.plan import cabling_plan, plan_for, switch_links
from cluster_tool.parsers.ibnetdiscover import parse_ibnetdiscover
from cluster_tool.spec.loader import load_spec_text
from tests.unit.checks.fabric_text import FabricText

REPO = Path(__file__).resolve().parent.parent
PHASES = ("spec", "parse", "plan", "check")


def spec_yaml(nodes: int) -> str:
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
    return yaml.safe_dump(data)


def spec_with(nodes: int) -> Any:
    return load_spec_text(spec_yaml(nodes), "bench.yml")


def fabric_text(cluster: Any) -> str:
    rows, links = cabling_plan(cluster), switch_links(cluster)
    fabric = FabricText.from_plan(rows, links)
    fabric.swap(rows[8 * 5].node, rows[8 * 5 + 1].hca, rows[8 * 5 + 2].hca)
    return fabric.text()


def check_once(spec: str, text: str) -> dict[str, float]:
    """One `fabric check` as the command runs it, CPU seconds per phase."""
    t0 = time.process_time()
    cluster = load_spec_text(spec, "bench.yml")
    t1 = time.process_time()
    discovered = parse_ibnetdiscover(text)
    t2 = time.process_time()
    plan = plan_for(cluster)
    t3 = time.process_time()
    findings = fabric_findings(
        cluster, discovered, None, plan=plan, counters_required=False, host="sm"
    )
    t4 = time.process_time()
    assert [f.check for f in findings] == ["fabric.swapped"], findings
    return {"spec": t1 - t0, "parse": t2 - t1, "plan": t3 - t2, "check": t4 - t3}


def peak_mb(run: Callable[[], object]) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def cluster_tool_argv() -> list[str]:
    """`cluster-tool` as its console script runs it, from this checkout (whichever is
    installed), so a copy of an older commit measures its own code."""
    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); from cluster_tool.cli import main; "
    return [sys.executable, "-c", code + "sys.exit(main())"]


# The child is started from a small Python that waits for it: a child forked from this
# process would count the pages it shares with it (hundreds of MB of test input) in its RSS.
_WAIT = (
    "import os, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "_, status, u = os.wait4(p.pid, 0)\n"
    "print(u.ru_utime + u.ru_stime, u.ru_maxrss, os.waitstatus_to_exitcode(status))\n"
)


def child(argv: list[str]) -> tuple[float, float, int]:
    """CPU seconds (user + system), peak RSS in MB and exit code of one run of `argv`."""
    out = subprocess.run(
        [sys.executable, "-c", _WAIT, *argv], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[0]), int(out[1]) / 1024, int(out[2])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--limit", type=float, default=1.3)
    args = ap.parse_args()
    sizes = sorted(args.sizes)
    inputs = {}
    for n in sizes:
        spec = spec_yaml(n)
        inputs[n] = (spec, fabric_text(load_spec_text(spec, "bench.yml")))

    # In process: the sizes take turns; each sample covers as many nodes as the largest fleet.
    best = {n: dict.fromkeys(PHASES, float("inf")) for n in sizes}
    most = max(sizes)
    for _ in range(args.repeat):
        for n in sizes:
            times = max(1, most // n)
            gc.collect()
            sums = dict.fromkeys(PHASES, 0.0)
            for _ in range(times):
                for phase, cpu in check_once(*inputs[n]).items():
                    sums[phase] += cpu
            for phase in PHASES:
                best[n][phase] = min(best[n][phase], sums[phase] / times)
    peaks = {n: peak_mb(functools.partial(check_once, *inputs[n])) for n in sizes}

    head = "{:>5} {:>8} {:>7}  " + "{:>7} " * len(PHASES) + "{:>8} {:>9} {:>7} {:>9}"
    print(
        head.format("nodes", "lines", "MB in", *PHASES, "total s", "µs/node", "growth", "peak MB")
    )
    first = sum(best[sizes[0]].values()) / sizes[0]
    growth = 0.0
    for n in sizes:
        spec, text = inputs[n]
        total = sum(best[n].values())
        growth = max(growth, total / n / first)
        print(
            head.format(
                n,
                text.count("\n"),
                f"{len(text) / 1e6:.1f}",
                *(f"{best[n][p]:.3f}" for p in PHASES),
                f"{total:.3f}",
                f"{total / n * 1e6:.0f}",
                f"{total / n / first:.2f}x",
                f"{peaks[n]:.0f}",
            )
        )

    # The command itself, in a fresh process per size.
    tool = cluster_tool_argv()
    print("\nthe command in a child process (CPU user+sys, peak RSS, best of the runs):")
    version = min((child([*tool, "--version"]) for _ in range(args.repeat)), key=lambda r: r[0])
    print(f"  cluster-tool --version            {version[0]:6.3f} s  {version[1]:6.0f} MB")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            spec_path, fabric_path = Path(tmp, f"spec{n}.yml"), Path(tmp, f"fabric{n}.txt")
            spec_path.write_text(inputs[n][0])
            fabric_path.write_text(inputs[n][1])
            argv = [*tool, "fabric", "check", "--spec", str(spec_path)]
            argv += ["--ibnetdiscover", str(fabric_path)]
            cpu, rss, code = min((child(argv) for _ in range(args.repeat)), key=lambda r: r[0])
            assert code == 1, f"fabric check exited {code}, expected 1 (one swapped pair)"
            print(f"  fabric check, {n:>5} nodes         {cpu:6.3f} s  {rss:6.0f} MB")

    big = sizes[-1]
    total = sum(best[big].values())
    print(
        f"\nin process at {big} nodes: {total:.2f} s CPU "
        f"({'under' if total < 1 else 'OVER'} the 1 s goal), peak {peaks[big]:.0f} MB "
        f"({'under' if peaks[big] < 100 else 'OVER'} the 100 MB goal); worst growth per node "
        f"{growth:.2f}x (limit {args.limit:g}x); load average "
        + " ".join(f"{x:.1f}" for x in os.getloadavg())
    )
    return 0 if growth <= args.limit else 1


if __name__ == "__main__":
    raise SystemExit(main())
