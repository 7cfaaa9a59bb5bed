"""Time how long `cluster-tool` takes to start, against a bare `python -c pass`, in one run.

Every Slurm HealthCheckProgram run (`cluster-tool node-check --slurm`, on every node at every
interval) and every lab test pays this. Each command runs in a fresh subprocess; the commands
take turns round by round so a busy machine slows them all alike; the median is kept.
Run: .venv/bin/python benchmarks/cli_startup.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cluster_tool_exe() -> str:
    """The `cluster-tool` console script next to this Python (the venv's), else on PATH."""
    beside = Path(sys.executable).parent / "cluster-tool"
    if beside.is_file():
        return str(beside)
    found = shutil.which("cluster-tool")
    if found is None:
        sys.exit("cluster-tool is not installed next to this Python nor on PATH")
    return found


def commands() -> list[tuple[str, list[str]]]:
    tool = cluster_tool_exe()
    return [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("cluster-tool --version", [tool, "--version"]),
        ("cluster-tool --help", [tool, "--help"]),
        ("cluster-tool node-check --help", [tool, "node-check", "--help"]),
        (
            "cluster-tool spec check examples/h100-1su.yml",
            [tool, "spec", "check", "examples/h100-1su.yml"],
        ),
    ]


# As installed: bytecode cached (the warm-up writes it), else every run compiles from source.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"NO_COLOR": "1"}


def timed(argv: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run(
        argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, check=False
    )
    return time.perf_counter() - start, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=9, help="runs per command (median kept)")
    args = parser.parse_args()
    cmds = commands()
    for _, argv in cmds:  # warm the page cache and write the .pyc files; not counted
        timed(argv)
    runs: dict[str, list[float]] = {name: [] for name, _ in cmds}
    codes: dict[str, int] = {}
    for _ in range(args.repeat):
        for name, argv in cmds:
            elapsed, codes[name] = timed(argv)
            runs[name].append(elapsed)
    base = statistics.median(runs[cmds[0][0]])
    width = max(len(name) for name, _ in cmds)
    print(f"median wall time of {args.repeat} runs each, ratio to `python -c pass`:")
    for name, _ in cmds:
        median = statistics.median(runs[name])
        code = f"  (exit {codes[name]})" if codes[name] else ""
        print(f"  {name:<{width}}  {median * 1000:7.1f} ms  {median / base:5.1f}x{code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
