"""What a lab node shows of its CPUs and memory: its profile's, as it shows its profile's GPUs
and HCAs. A node is a namespace on this machine, so `lscpu` and /proc/meminfo would show the lab
host's (two cores, some GiB) where the spec's profile declares a GPU server's; Slurm is already
told to take the declared figures (`SlurmdParameters=config_overrides`, data/group_vars.yml).
Written per node at `lab up`; the node's boot (data/node-boot.sh) mounts them over
/proc/meminfo and at /usr/local/bin/lscpu. nproc, sysconf and the cgroups still see the host's
CPUs: what runs on the node runs on them."""

from __future__ import annotations

import os
from pathlib import Path

from cluster_lab import model as hw

__all__ = ["lscpu_script", "meminfo_text", "write_host_views"]


def meminfo_text(mem_total_kib: int) -> str:
    """/proc/meminfo of an idle node with `mem_total_kib` (the fields `free` and the tool read)."""
    free = mem_total_kib * 98 // 100
    rows = [
        ("MemTotal", mem_total_kib),
        ("MemFree", free),
        ("MemAvailable", free),
        ("Buffers", 0),
        ("Cached", 0),
        ("SwapCached", 0),
        ("SwapTotal", 0),
        ("SwapFree", 0),
    ]
    return "".join(f"{key + ':':<16}{value:>12} kB\n" for key, value in rows)


def lscpu_script(cpu: hw.Cpu) -> str:
    """`lscpu` (util-linux's default layout) printing the profile's sockets, cores and threads."""
    cpus = cpu.sockets * cpu.cores_per_socket * cpu.threads_per_core
    rows = [
        ("Architecture", "x86_64"),
        ("CPU op-mode(s)", "32-bit, 64-bit"),
        ("Byte Order", "Little Endian"),
        ("CPU(s)", str(cpus)),
        ("On-line CPU(s) list", f"0-{cpus - 1}"),
        ("Thread(s) per core", str(cpu.threads_per_core)),
        ("Core(s) per socket", str(cpu.cores_per_socket)),
        ("Socket(s)", str(cpu.sockets)),
        ("NUMA node(s)", str(cpu.sockets)),
        ("Model name", "cluster-tool lab CPU (the node profile's topology)"),
    ]
    body = "".join(f"{key + ':':<33}{value}\n" for key, value in rows)
    return (
        "#!/bin/sh\n"
        "# cluster-tool lab: this node's CPUs as its profile declares them (the namespace runs\n"
        "# on the lab host's). Only the default layout is simulated.\n"
        'if [ "$#" -gt 0 ]; then\n'
        '    echo "lscpu (cluster-tool lab): only the default layout is simulated" >&2\n'
        "    exit 1\n"
        "fi\n"
        "cat <<'LSCPU'\n" + body + "LSCPU\n"
    )


def write_host_views(model: hw.HardwareModel, nodes_dir: Path) -> None:
    """Each GPU node's `hw/meminfo` and `hw/lscpu` under its lab folder (none for a node whose
    model has no profile figures: it shows the host's)."""
    for node in model.nodes:
        folder = nodes_dir / node.name / "hw"
        if node.cpu is None and node.mem_total_kib is None:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        if node.mem_total_kib is not None:
            (folder / "meminfo").write_text(meminfo_text(node.mem_total_kib))
        if node.cpu is not None:
            script = folder / "lscpu"
            script.write_text(lscpu_script(node.cpu))
            os.chmod(script, 0o755)
