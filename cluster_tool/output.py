"""Where command output goes: machine output on stdout, progress and logs on stderr (TTY only).

Text shown on a terminal is data, never instructions to it: control and escape characters (from
node descriptions, tool output, file names) are shown escaped (`\\x1b`), and rich markup is not
interpreted unless a caller asks for it on text it wrote itself.
"""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    stdout: Console
    stderr: Console

_consoles: dict[str, Console] = {}

# C0 and C1 controls (ESC starts a terminal escape sequence, CR overwrites a line), DEL, and
# the Unicode bidirectional controls that reorder what a person reads; tab and newline pass.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """`text` with every control character written out as an escape (`\\x1b`, `\\u202e`)."""
    return _CONTROL.sub(_escaped, text)


def __getattr__(name: str) -> Any:
    # `stdout` and `stderr` are made on first use: --version, --json and the exit codes need no
    # rich, and every run of the tool would pay for importing it.
    if name not in ("stdout", "stderr"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _console(name)


def _console(name: str) -> Console:
    if name not in _consoles:
        from rich.console import Console

        class SafeConsole(Console):
            """A console that escapes control characters in the strings it prints and reads
            no markup in them unless `markup=True` is passed."""

            def print(self, *objects: Any, **kwargs: Any) -> None:
                kwargs.setdefault("markup", False)
                shown = [escape_controls(o) if isinstance(o, str) else o for o in objects]
                super().print(*shown, **kwargs)

        # rich honours NO_COLOR and drops styles when the stream is not a terminal.
        _consoles[name] = SafeConsole(
            stderr=name == "stderr", highlight=False, soft_wrap=True, markup=False
        )
    return _consoles[name]


def emit_json(data: Any) -> None:
    """Write one JSON document to stdout, stable key order so runs diff cleanly."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def progress(message: str) -> None:
    """A progress line for a person watching; silent when stderr is not a terminal."""
    console = _console("stderr")
    if console.is_terminal:
        console.print(message)


def error_line(message: str) -> None:
    """One-line error on stderr, always shown."""
    first = escape_controls(message.strip()).split("\n")
    text = "\n".join(first) if len(first) > 1 and _is_located(first) else first[0]
    sys.stderr.write(f"cluster-tool: {text}\n" if not _is_located(first) else text + "\n")
    sys.stderr.flush()


def _is_located(lines: list[str]) -> bool:
    # Spec problems already carry FILE:LINE:COL and are printed one per line, unprefixed.
    return all(line.count(":") >= 3 for line in lines)
