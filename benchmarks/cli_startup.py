"""Time how long `cluster-tool` takes to start, against a bare `python -c pass`, in one run.

Every Slurm HealthCheckProgram run (`cluster-tool node-check --slurm`, on every node at every
interval) and every lab test pays this. Each command runs in a fresh subprocess; the commands
take turns round by round so a busy machine slows them all alike. Printed per command: the
minimum and median wall time, the median CPU (user + system, from wait4), and the ratio of
the median wall time to the bare interpreter's. Issue 35's goals: `--version` and `spec check`
of a small spec within a few times the bare interpreter; `spec check` of the 1-SU example
under 0.25 s.

`--against DIR` runs the same commands from another checkout (e.g. a `git worktree` of the
commit before a change) beside this one, both through this Python (`python -c` importing
`cluster_tool.cli` from the tree), so a before/after comparison is measured side by side.
Run: .venv/bin/python benchmarks/cli_startup.py [--repeat N] [--against DIR]
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
SMALL_SPEC = "examples/h100-1su.yml"


def cluster_tool_exe() -> str:
    """The `cluster-tool` console script next to this Python (the venv's), else on PATH."""
    beside = Path(sys.executable).parent / "cluster-tool"
    if beside.is_file():
        return str(beside)
    found = shutil.which("cluster-tool")
    if found is None:
        sys.exit("cluster-tool is not installed next to this Python nor on PATH")
    return found


def launcher(tree: Path) -> list[str]:
    """`cluster-tool` as its console script runs it, from the checkout at `tree`."""
    code = f"import sys; sys.path.insert(0, {str(tree)!r}); from cluster_tool.cli import main; "
    return [sys.executable, "-c", code + "sys.exit(main())"]


ARGS = [
    ("--version", ["--version"]),
    ("--help", ["--help"]),
    ("node-check --help", ["node-check", "--help"]),
    (f"spec check {SMALL_SPEC}", ["spec", "check", SMALL_SPEC]),
]


def commands(against: Path | None) -> list[tuple[str, list[str]]]:
    out = [("python -c pass", [sys.executable, "-c", "pass"])]
    if against is None:
        tool = [cluster_tool_exe()]
        out += [(f"cluster-tool {name}", tool + args) for name, args in ARGS]
        return out
    for name, args in ARGS:
        out.append((f"this tree:    {name}", launcher(ROOT) + args))
        out.append((f"{against.name}: {name}", launcher(against) + args))
    return out


# As installed: bytecode cached (the warm-up writes it), else every run compiles from source.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"NO_COLOR": "1"}


def timed(argv: list[str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system) and exit code of one run."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=9, help="runs per command (median kept)")
    parser.add_argument("--against", type=Path, help="another checkout to run side by side")
    args = parser.parse_args()
    cmds = commands(args.against.resolve() if args.against else None)
    for _, argv in cmds:  # warm the page cache and write the .pyc files; not counted
        timed(argv)
    walls: dict[str, list[float]] = {name: [] for name, _ in cmds}
    cpus: dict[str, list[float]] = {name: [] for name, _ in cmds}
    codes: dict[str, int] = {}
    for _ in range(args.repeat):
        for name, argv in cmds:
            wall, cpu, codes[name] = timed(argv)
            walls[name].append(wall)
            cpus[name].append(cpu)
    base = statistics.median(walls[cmds[0][0]])
    width = max(len(name) for name, _ in cmds)
    print(f"{args.repeat} runs each; wall min / median, CPU median, median wall / bare python:")
    for name, _ in cmds:
        low, median = min(walls[name]), statistics.median(walls[name])
        cpu = statistics.median(cpus[name])
        code = f"  (exit {codes[name]})" if codes[name] else ""
        print(
            f"  {name:<{width}}  {low * 1000:7.1f} / {median * 1000:7.1f} ms wall  "
            f"{cpu * 1000:7.1f} ms CPU  {median / base:5.1f}x{code}"
        )
    print("load average: " + " ".join(f"{x:.1f}" for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
