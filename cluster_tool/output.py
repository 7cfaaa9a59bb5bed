"""Where command output goes: machine output on stdout, progress and logs on stderr (TTY only)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    stdout: Console
    stderr: Console

_consoles: dict[str, Console] = {}


def __getattr__(name: str) -> Any:
    # `stdout` and `stderr` are made on first use: --version, --json and the exit codes need no
    # rich, and every run of the tool would pay for importing it.
    if name not in ("stdout", "stderr"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _console(name)


def _console(name: str) -> Console:
    if name not in _consoles:
        from rich.console import Console

        # rich honours NO_COLOR and drops markup when the stream is not a terminal.
        _consoles[name] = Console(stderr=name == "stderr", highlight=False, soft_wrap=True)
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
    first = message.strip().splitlines() or [""]
    text = message.strip() if len(first) > 1 and _is_located(first) else first[0]
    sys.stderr.write(f"cluster-tool: {text}\n" if not _is_located(first) else text + "\n")
    sys.stderr.flush()


def _is_located(lines: list[str]) -> bool:
    # Spec problems already carry FILE:LINE:COL and are printed one per line, unprefixed.
    return all(line.count(":") >= 3 for line in lines)
