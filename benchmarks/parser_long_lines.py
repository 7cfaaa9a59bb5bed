"""The slowest 50 KB line of every parser, against the same line at 25 KB (issue 32).

Each kind of line of each parser's sample (the ones `tests/unit/parsers/test_linear_time.py`
uses) is grown at every field boundary, as that test grows it, to 25,000 and 50,000
characters; the slowest variant at 50 KB is printed per parser with its time at 25 KB and the
ratio of the two (goal: under 0.1 s, ratio about 2; before issue 32 such a line took 27.7 s in
the ibstat parser). CPU time of this process, the fastest of three runs. Never a test
assertion.

Run: `.venv/bin/python benchmarks/parser_long_lines.py [PARSER ...]`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.unit.parsers import test_linear_time as lines

SHORT, LONG = 25_000, 50_000


def _maker(before: list[str], grow: Callable[[int], str]) -> Callable[[int], str]:
    return lambda n: "\n".join([*before, grow(n)]) + "\n"


def main(names: list[str]) -> None:
    cases = lines._cases()
    print(f"{'parser':26} {'50 KB s':>9} {'25 KB s':>9} {'ratio':>6}  slowest line, grown by")
    worst_overall = 0.0
    for name in names or sorted(cases):
        parse, text = cases[name]
        worst = (0.0, 0.0, "", "")
        for before, line in lines._kinds_of_line(text):
            for growth, grow in lines._growths(line):
                make = _maker(before, grow)

                long = lines._fastest(parse, make(LONG), 1, 3)
                if long > worst[0]:
                    short = lines._fastest(parse, make(SHORT), 1, 3)
                    worst = (long, short, line[:40], growth)
        long, short, line, growth = worst
        worst_overall = max(worst_overall, long)
        print(
            f"{name:26} {long:9.4f} {short:9.4f} {long / max(short, 1e-9):6.2f}  {line!r}, {growth}"
        )
    print(f"slowest 50 KB line of all: {worst_overall:.4f} s (goal: under 0.1 s)")


if __name__ == "__main__":
    main(sys.argv[1:])
