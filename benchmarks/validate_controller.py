"""Controller CPU per node of `validate --health` at 256, 1,024 and 4,096 nodes, side by side in
one run: everything the controller does with what the nodes printed (split each node's
composite output, work out what the node is held to, parse, check, judge versions across the
fleet, list what did not run, build the report), with the network taken away.

The spec is examples/h100-1su.yml widened to N GPU nodes (31 per scalable unit, as there). Every
node answers with the same outputs through an in-memory transport: the real captures of an
8x H100 SXM5 node (`nvidia-smi -q`, driver 535.161.08; `ibstat` of 8 ConnectX-7 at NDR; from
the shared real outputs, first line dropped) and, for the small probes, lines in the tools'
own format (the version probe's, `uname -r`, `ls /sys/module`, the rendered nccl.conf).

CPU is this process's (`time.process_time`), the best of `--repeat` runs per size, the sizes
taking turns. Prints ms per node and the growth per node against the smallest size; exits 1
past `--limit` (1.3x). Never a test assertion.

Run: `.venv/bin/python benchmarks/validate_controller.py [--sizes 256 1024 4096] [--repeat 3]`.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from cluster_tool.remote.fanout import Target
from cluster_tool.render.engine import render_nccl_conf
from cluster_tool.spec.loader import load_spec_text
from cluster_tool.spec.models import Cluster
from cluster_tool.workflows.collect import run_validate

REPO = Path(__file__).resolve().parent.parent
REAL = Path(
    os.environ.get(
        "CLUSTER_TOOL_REAL_OUTPUTS", REPO.parent / "shared" / "fixtures" / "real-outputs"
    )
)
PER_SU = 31  # examples/h100-1su.yml: the 32nd leaf port of every rail is the UFM appliance's


def real(name: str) -> str:
    """A real capture without its first line (which names its public source)."""
    return (REAL / name).read_text(encoding="utf-8").split("\n", 1)[1]


def widened(nodes: int) -> Cluster:
    """examples/h100-1su.yml with `nodes` GPU nodes over as many scalable units as they fill."""
    data = yaml.safe_load((REPO / "examples" / "h100-1su.yml").read_text())
    data["management"]["network"] = "10.0.0.0/8"
    gpu = next(group for group in data["nodes"] if str(group["hosts"]).startswith("gpu"))
    gpu["hosts"] = f"gpu[0001-{nodes:04d}]"
    gpu["address"] = "10.1.0.1"
    data["bmc"]["address_pattern"] = "{name}-bmc"
    sus = -(-nodes // PER_SU)
    # Past one SU the leaves need spines: as many as a leaf has uplinks (half its 64 ports),
    # each with a port for every leaf.
    if sus > 1:
        data["fabric"]["spines"] = 32
        data["fabric"]["spine_ports"] = max(64, sus * data["fabric"]["rails"])
    data["fabric"]["su_size"] = 32
    return load_spec_text(yaml.safe_dump(data), "bench.yml")


def node_outputs(cluster: Cluster) -> dict[str, tuple[int, str]]:
    """Probe name -> (exit status, stdout) every node answers with."""
    ibstat = real("ibstat_h100_8xcx7_ndr_ib_all_active.txt")
    hcas = re.findall(r"CA '(mlx5_\d+)'.*?CA type: (\S+).*?Firmware version: (\S+)", ibstat, re.S)
    versions = "kernel 5.15.0-105-generic\nmodule nvidia 535.161.08\n" + "".join(
        f"hca {dev} {ca_type} {fw} MT_0000000838\n" for dev, ca_type, fw in hcas
    )
    return {
        "nvidia-smi-q": (0, real("nvidia-smi-q_h100x8_driver535.161.08_full.txt")),
        "ibstat": (0, ibstat),
        "kernel-log": (0, "[    2.104321] mlx5_core 0000:18:00.0: firmware version: 28.39.1002\n"),
        "modules": (0, "mlx5_core\nmlx5_ib\nnvidia\nnvidia_peermem\nnvidia_uvm\n"),
        "nvidia-version": (
            0,
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  "
            "Tue Mar  5 22:42:15 UTC 2024\n",
        ),
        "kernel-release": (0, "5.15.0-105-generic\n"),
        "nccl-conf": (0, render_nccl_conf(cluster)),
        "versions": (0, versions),
    }


class MemoryTransport:
    """Answers every node's probe script at once with the prepared outputs, in the composite
    format the fan-out reads (cluster_tool.remote.probes): no network, no shell."""

    def __init__(self, outputs: dict[str, tuple[int, str]]) -> None:
        self.outputs = outputs

    def run(self, target: Target, script: str, timeout: float) -> tuple[int, bytes, bytes]:
        token = re.search(r'"@@cluster-tool (\w+) ', script)
        names = re.findall(r"^run (\S+) ", script, re.M)
        assert token is not None, "not the fan-out's script"
        out = bytearray()
        for name in names:
            rc, text = self.outputs.get(name, (127, ""))
            if name == "hostname":
                rc, text = 0, target.name + "\n"
            body = text.encode()
            err = b"" if rc != 127 else f"sh: 1: {name}: not found\n".encode()
            out += (
                f"@@cluster-tool {token.group(1)} {name} {rc} {len(body)} {len(err)}@@\n".encode()
            )
            out += body + err
        return 0, bytes(out), b""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--limit", type=float, default=1.3)
    args = ap.parse_args()
    runs: dict[int, Any] = {}
    for n in sorted(args.sizes):
        cluster = widened(n)
        transport = MemoryTransport(node_outputs(cluster))
        runs[n] = (cluster, transport)
    best = dict.fromkeys(runs, float("inf"))
    findings: dict[int, int] = {}
    for _ in range(args.repeat):
        for n, (cluster, transport) in runs.items():
            gc.collect()
            start = time.process_time()
            result = run_validate(
                cluster, fabric=False, dcgm=False, transport=transport, concurrency=32
            )
            best[n] = min(best[n], (time.process_time() - start) / n)
            assert not result.unreachable, result.unreachable[:3]
            findings[n] = len(result.report.findings)
    first = best[min(best)]
    worst = max(cost / first for cost in best.values())
    print(f"{'N':>6} {'ms per node':>12} {'x smallest':>10} {'findings':>9}")
    for n, cost in best.items():
        print(f"{n:>6} {cost * 1e3:>12.2f} {cost / first:>10.2f} {findings[n]:>9}")
    print(
        f"\nvalidate --health --no-fabric --no-dcgm through an in-memory transport; process CPU, "
        f"best of {args.repeat}; worst growth per node {worst:.2f}x (limit {args.limit:g}x)"
    )
    return 1 if worst > args.limit else 0


if __name__ == "__main__":
    raise SystemExit(main())
