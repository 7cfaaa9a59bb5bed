"""Time report.html for a 1,024-node validation (8 rails, ~6,700 gate rows, 1,001 findings).

Run: `.venv/bin/python benchmarks/report.py [REPEAT]` (default 5). Builds the run the report
tests use (tests/unit/report/fleet_run.py: the fabric plan's link matrix, a link.ber finding,
1,000 gpu.temperature warnings, the gate's busbw rows through the workflows' RecordingRunner),
then renders the page REPEAT times and prints the best and median time and the page's size.
Never a test assertion.
"""

from __future__ import annotations

import functools
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cluster_tool.report.html import render_html
from cluster_tool.workflows import common
from tests.unit.report.fleet_run import NODES, fleet_run


def main() -> None:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    # The recorder parses every step's output; the synthetic fleet prints a dozen texts.
    common.parse_nccl_tests = functools.cache(common.parse_nccl_tests)  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        summary, findings = fleet_run(Path(tmp), slow=True)
        built = time.perf_counter() - started
    times = []
    page = ""
    for _ in range(repeat):
        started = time.perf_counter()
        page = render_html(summary, findings)
        times.append(time.perf_counter() - started)
    print(
        f"{len(NODES)} nodes, {len(summary['links'])} node-rails, {len(summary['busbw'])} gate "
        f"rows, {len(findings)} findings (built in {built:.2f} s)"
    )
    print(
        f"render_html: best {min(times) * 1000:.0f} ms, median "
        f"{statistics.median(times) * 1000:.0f} ms over {repeat}; page "
        f"{len(page.encode()) / 1e6:.2f} MB"
    )


if __name__ == "__main__":
    main()
