"""Time `parse_ibnetdiscover` on a generated 1,024-node x 8-HCA fabric against a 32-node one,
and what the normalising step in front of every parser costs on top.

Run: `.venv/bin/python benchmarks/parsers.py`. Prints both times, their ratio and the node
ratio side by side (goal: linear, and under 1 s for 1,024 nodes), then the 1,024-node parse
through the normalising step, clean and as collected (a prompt line, `pdsh` prefixes, CRLF),
against the bare parser (goal: at most 10 % on top), the variants run round-robin. Never a
test assertion. On a shared 2-core machine the overhead figures move by about 3 points from
one run to the next: compare several runs, not one.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collections.abc import Callable
from typing import Any

from cluster_tool.parsers import KINDS
from cluster_tool.parsers.ibnetdiscover import parse_ibnetdiscover
from cluster_tool.parsers.normalise import relocate

NODES_PER_SU = 32
HCAS = 8  # one rail per HCA: one leaf per rail per SU
LEAF_UPLINKS = 32  # 64-port leaves: 32 down to hosts, 32 up to spines
SPINE_PORTS = 64


def generate_ibnetdiscover(nodes: int, hcas: int = HCAS) -> str:
    """ibnetdiscover text of a rail-optimised fat tree: `nodes` hosts x `hcas` HCAs at 4xNDR,
    one leaf per rail per SU, every leaf with LEAF_UPLINKS spine links (both ends listed)."""
    sus = max(1, nodes // NODES_PER_SU)
    leaves = [(su, rail) for su in range(sus) for rail in range(hcas)]
    spines = max(1, len(leaves) * LEAF_UPLINKS // SPINE_PORTS)
    lid = iter(range(1, 1 << 20))
    leaf_guid = {leaf: 0x9C0591030000000 + i for i, leaf in enumerate(leaves)}
    spine_guid = [0x9C0592030000000 + i for i in range(spines)]
    leaf_lid = {leaf: next(lid) for leaf in leaves}
    spine_lid = [next(lid) for _ in range(spines)]
    ca_guid = {
        (n, h): 0xA088C20300000000 + n * 16 + h * 2 for n in range(nodes) for h in range(hcas)
    }
    ca_lid = {key: next(lid) for key in ca_guid}

    def leaf_name(leaf: tuple[int, int]) -> str:
        return f"MF0;su{leaf[0] + 1}-leaf-r{leaf[1]}:MQM9700/U1"

    def spine_name(s: int) -> str:
        return f"MF0;spine{s + 1:03d}:MQM9700/U1"

    # Leaf uplink u of leaf i goes to spine (i*LEAF_UPLINKS+u) % spines on the next free port.
    spine_ports: list[list[tuple[tuple[int, int], int]]] = [[] for _ in range(spines)]
    leaf_up: dict[tuple[tuple[int, int], int], tuple[int, int]] = {}
    for i, leaf in enumerate(leaves):
        for u in range(LEAF_UPLINKS):
            s = (i * LEAF_UPLINKS + u) % spines
            spine_ports[s].append((leaf, NODES_PER_SU + 1 + u))
            leaf_up[(leaf, NODES_PER_SU + 1 + u)] = (s, len(spine_ports[s]))

    out = [
        "#",
        "# Topology file: generated on Mon Jan  1 00:00:00 2024",
        "#",
        "# Initiated from node a088c20300000000 port a088c20300000001",
        "",
    ]
    for s in range(spines):
        g = spine_guid[s]
        out += ["vendid=0x2c9", "devid=0xd2f2", f"sysimgguid={g:#x}", f"switchguid={g:#x}({g:x})"]
        out.append(
            f'Switch\t{SPINE_PORTS + 1} "S-{g:016x}"\t\t# "{spine_name(s)}" enhanced port 0 '
            f"lid {spine_lid[s]} lmc 0"
        )
        for p, (leaf, leaf_port) in enumerate(spine_ports[s], 1):
            out.append(
                f'[{p}]\t"S-{leaf_guid[leaf]:016x}"[{leaf_port}]\t\t# "{leaf_name(leaf)}" '
                f"lid {leaf_lid[leaf]} 4xNDR"
            )
        out.append("")
    for leaf in leaves:
        g = leaf_guid[leaf]
        su, rail = leaf
        out += ["vendid=0x2c9", "devid=0xd2f2", f"sysimgguid={g:#x}", f"switchguid={g:#x}({g:x})"]
        out.append(
            f'Switch\t{SPINE_PORTS + 1} "S-{g:016x}"\t\t# "{leaf_name(leaf)}" enhanced port 0 '
            f"lid {leaf_lid[leaf]} lmc 0"
        )
        for i in range(NODES_PER_SU):
            n = su * NODES_PER_SU + i
            if n >= nodes:
                break
            cg = ca_guid[(n, rail)]
            out.append(
                f'[{i + 1}]\t"H-{cg:016x}"[1]({cg + 1:x}) \t\t# "gpu{n + 1:04d} mlx5_{rail}" '
                f"lid {ca_lid[(n, rail)]} 4xNDR"
            )
        for u in range(LEAF_UPLINKS):
            s, sp = leaf_up[(leaf, NODES_PER_SU + 1 + u)]
            out.append(
                f'[{NODES_PER_SU + 1 + u}]\t"S-{spine_guid[s]:016x}"[{sp}]\t\t# "{spine_name(s)}" '
                f"lid {spine_lid[s]} 4xNDR"
            )
        out.append("")
    for (n, h), cg in ca_guid.items():
        su, leaf = n // NODES_PER_SU, (n // NODES_PER_SU, h)
        out += ["vendid=0x2c9", "devid=0x1021", f"sysimgguid={cg:#x}", f"caguid={cg:#x}"]
        out.append(f'Ca\t1 "H-{cg:016x}"\t\t# "gpu{n + 1:04d} mlx5_{h}"')
        out.append(
            f'[1]({cg + 1:x}) \t"S-{leaf_guid[leaf]:016x}"[{n % NODES_PER_SU + 1}]\t\t'
            f'# lid {ca_lid[(n, h)]} lmc 0 "{leaf_name(leaf)}" lid {leaf_lid[leaf]} 4xNDR'
        )
        out.append("")
    return "\n".join(out)


def best_of(
    text: str, repeats: int, parse: Callable[[str], Any] = parse_ibnetdiscover
) -> tuple[float, float]:
    """Best wall time and best CPU time of `repeats` parses. CPU time is the fairer figure on
    a shared machine: other people's jobs stretch wall time, not the work done."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        parse(text)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus)


def main() -> int:
    small_nodes, big_nodes = 32, 1024
    small, big = generate_ibnetdiscover(small_nodes), generate_ibnetdiscover(big_nodes)
    fabric = parse_ibnetdiscover(big)
    uplinks = len(fabric.ca_uplinks())
    assert uplinks == big_nodes * HCAS, uplinks  # the generated fabric is what we meant
    start = time.perf_counter()
    fabric.ca_uplinks()
    fabric.switch_ports()
    fabric.links()
    accessors = time.perf_counter() - start
    small_wall, small_cpu = best_of(small, 7)
    big_wall, big_cpu = best_of(big, 5)
    for nodes, text, wall, cpu in (
        (small_nodes, small, small_wall, small_cpu),
        (big_nodes, big, big_wall, big_cpu),
    ):
        print(
            f"ibnetdiscover {nodes:>5} nodes x {HCAS} HCAs: {text.count(chr(10)):>7} lines  "
            f"best wall {wall * 1000:8.1f} ms  best CPU {cpu * 1000:8.1f} ms"
        )
    print(
        f"ratio 1,024/32 nodes: wall {big_wall / small_wall:.1f}x, CPU {big_cpu / small_cpu:.1f}x "
        f"(node ratio {big_nodes / small_nodes:.0f}x: linear); 1,024 nodes under 1 s: "
        f"wall {'yes' if big_wall < 1.0 else 'NO'}, CPU {'yes' if big_cpu < 1.0 else 'NO'}"
    )
    print(f"ca_uplinks() + switch_ports() + links() on 1,024 nodes: {accessors * 1000:.1f} ms")
    normalising_overhead(big, big_nodes)
    return 0


def normalising_overhead(text: str, nodes: int) -> None:
    """The 1,024-node parse through the normalising step against the bare parser: clean text
    (the fast path: a look at the first lines) and a capture as an operator collects it."""
    kind = KINDS["ibnetdiscover"]
    collected = "$ pdsh -w head01 ibnetdiscover\r\n" + "".join(
        f"head01: {line}\r\n" for line in text.split("\n")
    )
    # The same fabric both ways; only the line numbers moved (one prompt line).
    read_back = kind.read(collected).hosts[0].records
    assert relocate(read_back, lambda n: n - 1) == kind.parse(text)
    lf = collected.replace("\r\n", "\n")
    runs: dict[str, tuple[Callable[[str], Any], str]] = {
        "bare": (kind.parse, text),
        "clean": (parse_ibnetdiscover, text),
        "lf": (kind.read, lf),
        "crlf": (kind.read, collected),
    }
    # Round-robin, best of 9 each: on a shared machine a burst of someone else's work then
    # lands on every variant alike instead of on whichever ran during it.
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(9):
        for name, (parse, given) in runs.items():
            best[name] = min(best[name], best_of(given, 1, parse)[1])
    bare, clean, lf_only, as_collected = best["bare"], best["clean"], best["lf"], best["crlf"]
    for what, cpu in (
        ("clean text", clean),
        ("prompt + pdsh prefixes", lf_only),
        ("prompt + pdsh prefixes + CRLF", as_collected),
    ):
        print(
            f"normalising, {nodes} nodes, {what}: best CPU {cpu * 1000:8.1f} ms against "
            f"{bare * 1000:.1f} ms bare: {100 * (cpu - bare) / bare:+.1f} % (goal: at most +10 %)"
        )


if __name__ == "__main__":
    raise SystemExit(main())
