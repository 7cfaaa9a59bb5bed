"""Time `spec check` + `render` for a 1,024-node spec against a 32-node spec, in one run.

Goal: linear in the node count (ratio near 32) and the 1,024-node spec under 3 s.
Run: .venv/bin/python benchmarks/render.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cluster_tool.render import render
from cluster_tool.spec import load_spec


def spec_text(nodes: int) -> str:
    """An HGX H100 cluster of `nodes` GPU nodes in SUs of 32.

    Beyond 4 SUs a two-tier fabric needs spines with more ports than a 64-port leaf
    (director-class switches): 32 spines, one link from every leaf to each.
    """
    sus = -(-nodes // 32)
    spine_ports = max(64, sus * 8)
    return f"""\
apiVersion: cluster-tool/v1
kind: Cluster
name: bench{nodes}
management:
  network: 10.0.0.0/8
bmc:
  address_pattern: "10.200.{{su}}.{{index_in_su}}"
  credentials:
    username: {{env: BMC_USERNAME}}
    password: {{env: BMC_PASSWORD}}
nodes:
  - hosts: head[01-02]
    address: 10.0.0.10
  - hosts: gpu[0001-{nodes:04d}]
    profile: hgx-h100-8x-ndr
    address: 10.1.0.1
fabric:
  subnet_manager: head02
  spines: 32
  spine_ports: {spine_ports}
slurm:
  controller: head01
  accounting_host: head02
"""


def check_and_render(spec: Path, out: Path) -> float:
    start = time.perf_counter()
    cluster = load_spec(spec)
    render(cluster, out)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="runs per size (median kept)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-render-") as tmp:
        root = Path(tmp)
        times: dict[int, float] = {}
        for nodes in (32, 1024):
            spec = root / f"spec-{nodes}.yml"
            spec.write_text(spec_text(nodes), encoding="utf-8")
            check_and_render(spec, root / f"warm-{nodes}")  # imports, template compile
            runs = [check_and_render(spec, root / f"out-{nodes}") for _ in range(args.repeat)]
            times[nodes] = statistics.median(runs)
        small, large = times[32], times[1024]
        print(f"check+render   32 nodes: {small * 1000:8.1f} ms (median of {args.repeat})")
        print(f"check+render 1024 nodes: {large * 1000:8.1f} ms (median of {args.repeat})")
        print(f"ratio 1024/32: {large / small:.1f}x for 32x the nodes (linear = 32x)")
        print(f"1024 nodes under 3 s: {'yes' if large < 3.0 else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
