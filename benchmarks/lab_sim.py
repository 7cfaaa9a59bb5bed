"""What a simulated tool costs inside a lab node, measured side by side in one run.

Run: `.venv/bin/python benchmarks/lab_sim.py`. Builds the simulator packages, unpacks them,
and times each tool as a node runs it (the system python3, no site packages) against a bare
`python3 -S -I -c pass` start, printing the ratio; then the per-call cost of refreshing the
sysfs trees of every node after a fault. Never a test assertion.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cluster_lab.faults import inject
from cluster_lab.sim.packages import build_sim_packages
from cluster_lab.sim.sysfs import write_all_sysfs_trees

REPO = Path(__file__).resolve().parent.parent
RUNS = 7


def timed(argv: list[str], env: dict[str, str]) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    model_data = json.loads((REPO / "tests" / "fixtures" / "sim" / "lab-model.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "node"
        start = time.perf_counter()
        debs = build_sim_packages(Path(tmp) / "debs")
        build_s = time.perf_counter() - start
        for deb in debs:
            subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
        model = Path(tmp) / "model.json"
        model.write_text(json.dumps(model_data))
        env = {
            "PATH": "/usr/bin:/bin",
            "LAB_MODEL": str(model),
            "LAB_NODE": "gpu001",
            "LAB_RUN_DIR": str(Path(tmp) / "run"),
            "LAB_MOUNT_KERNEL_VIEW": "0",
        }
        py = ["/usr/bin/python3", "-S", "-I"]
        base = timed([*py, "-c", "pass"], env)
        print(f"built {len(debs)} packages in {build_s:.2f} s")
        print(f"python3 start (baseline): {base * 1000:.1f} ms")
        tools = {
            "nvidia-smi -q": ["usr/bin/nvidia-smi", "-q"],
            "nvidia-smi --query-gpu": [
                "usr/bin/nvidia-smi",
                "--query-gpu=index,uuid,ecc.errors.uncorrected.volatile.total",
                "--format=csv",
            ],
            "nvidia-smi topo -m": ["usr/bin/nvidia-smi", "topo", "-m"],
            "dcgmi diag -r 3": ["usr/bin/dcgmi", "diag", "-r", "3"],
            "all_reduce_perf 2 nodes, 8 B-8 GB": [
                "usr/bin/all_reduce_perf",
                "-b",
                "8",
                "-e",
                "8G",
            ],
        }
        rank0 = {
            "PMIX_RANK": "0",
            "SLURM_PROCID": "0",
            "SLURM_NTASKS": "16",
            "SLURM_STEP_NODELIST": "gpu[001-002]",
            "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
        }
        for name, (path, *args) in tools.items():
            extra = rank0 if "perf" in path else {}
            t = timed([*py, str(root / path), *args], {**env, **extra})
            print(f"{name:<36} {t * 1000:7.1f} ms  = {t / base:4.1f}x a bare python3 start")
        nodes_dir = Path(tmp) / "nodes"
        write_all_sysfs_trees(model_data, nodes_dir)
        inject(model_data, "link-down", "gpu002", "mlx5_3")
        times = []
        for _ in range(RUNS):
            start = time.perf_counter()
            write_all_sysfs_trees(model_data, nodes_dir)
            times.append(time.perf_counter() - start)
        refresh = statistics.median(times)
        print(
            f"sysfs refresh of 4 nodes after a fault: {refresh * 1000:.1f} ms "
            f"= {refresh / base:.2f}x a bare python3 start"
        )


if __name__ == "__main__":
    main()
