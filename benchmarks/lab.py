"""How long `lab up` takes for head + 4 GPU nodes, and what each node costs in memory.

Run as root: `.venv/bin/python benchmarks/lab.py`. Builds (or reuses) the caches first,
so the timed `up` is the warm-cache case; runs on its own bridge/prefix/subnet (10.78.0.0/24)
and so can run beside a demo lab. Goals (issue 4): up < 120 s, < 100 MB per node.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cluster_lab import lifecycle  # noqa: E402
from cluster_lab.base import ensure_base  # noqa: E402
from cluster_lab.config import LabConfig  # noqa: E402
from cluster_lab.host import ProcRef  # noqa: E402
from cluster_lab.repo import ensure_repo  # noqa: E402
from cluster_lab.state import load_state  # noqa: E402

UP_GOAL_S = 120.0
NODE_GOAL_MB = 100.0


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cgroup_mb(path: Path) -> tuple[float, float]:
    """(rss, page cache) of a v1 memory cgroup, MB."""
    stats = dict(
        (k, int(v))
        for k, v in (line.split() for line in (path / "memory.stat").read_text().splitlines())
    )
    return stats.get("total_rss", 0) / 2**20, stats.get("total_cache", 0) / 2**20


def main() -> int:
    if os.geteuid() != 0:
        print("benchmarks/lab.py needs root", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="lab-bench."))
    config = LabConfig.from_env(
        lab_dir=work / "lab",
        prefix="ctb",
        bridge="ctblab0",
        subnet=ipaddress.IPv4Network("10.78.0.0/24"),
    )
    spec = work / "lab.yml"
    spec.write_text((REPO / "examples" / "lab.yml").read_text().replace("10.77.0.", "10.78.0."))
    ensure_repo(config, ensure_base(config))  # warm the caches outside the timing

    started = time.monotonic()
    status = lifecycle.up(config, spec)
    up_s = time.monotonic() - started
    try:
        time.sleep(3)  # let boot-time daemons settle before measuring
        state = load_state(config.state_file)
        assert state is not None
        memory = next(h for h in state.hierarchies if h.options == "memory")
        print(f"lab up, {len(status.nodes)} nodes, warm caches: {up_s:6.1f} s")
        print(f"  ratio to the {UP_GOAL_S:.0f} s goal:          {up_s / UP_GOAL_S:6.2f}")
        for stage, seconds in status.timings.items():
            print(f"    {stage:<40} {seconds:6.1f} s")
        print("  node      rss MB  cache MB  BMC MB  total MB  ratio to 100 MB")
        worst = 0.0
        for node in status.nodes:
            rss, cache = _cgroup_mb(Path(memory.lab_path) / node.name)
            bmc_ref = state.service_ref(f"bmc-{node.name}")
            bmc = _rss_mb(bmc_ref.pid) if bmc_ref and bmc_ref.alive() else 0.0
            total = rss + bmc
            worst = max(worst, total)
            print(
                f"  {node.name:<8} {rss:7.1f} {cache:9.1f} {bmc:7.1f} {total:9.1f}"
                f"  {total / NODE_GOAL_MB:6.2f}"
            )
        shared = {
            name: _rss_mb(ProcRef.from_json(ref).pid)
            for name, ref in state.services.items()
            if not name.startswith("bmc-") and ProcRef.from_json(ref).alive()
        }
        print("  shared services (MB): " + ", ".join(f"{k} {v:.1f}" for k, v in shared.items()))
        print(f"  worst node / goal: {worst / NODE_GOAL_MB:.2f}")
    finally:
        started = time.monotonic()
        lifecycle.down(config)
        print(f"lab down: {time.monotonic() - started:6.1f} s")
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
