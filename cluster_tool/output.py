"""Where command output goes: machine output on stdout, progress and logs on stderr (TTY only).

The one sink for what a command shows: the console lines on stdout, `--json`, progress and error
lines on stderr, and the files a command writes beside its run record (`--junit`) all pass the
secrets registry (`cluster_tool.redact.Secrets`) the run folder applies: every secret value in the
environment from the start, and those a command learns (`hide`: the BMC password the spec names,
a vault value) from then on. A node that echoes the BMC password is shown `[redacted]`.

Text shown on a terminal is data, never instructions to it: control and escape characters (from
node descriptions, tool output, file names) are shown escaped (`\\x1b`), and rich markup is not
interpreted unless a caller asks for it on text it wrote itself.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import TYPE_CHECKING, Any

from cluster_tool.redact import Secrets

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


# The registries the sink applies: the environment's, then every one a command hands over. Held by
# reference, so a secret a run learns later (a vault value) is hidden from then on here too.
_registries: list[Secrets] = []


def reset() -> None:
    """Start a command: forget earlier registries, read the environment's secrets afresh."""
    _registries.clear()
    _registries.append(Secrets.from_environ(os.environ))


def hide(secrets: Secrets) -> None:
    """Apply `secrets` (the run's registry, as the run folder applies it) to everything shown."""
    if not any(r is secrets for r in _registries):
        _registries.append(secrets)


def _secrets() -> Secrets:
    if not _registries:
        reset()
    merged = Secrets()
    for registry in _registries:
        merged.update(registry)
    return merged


def redact(text: str) -> str:
    """`text` with every registered secret replaced."""
    return _secrets().redact(text)


def redact_encoded(text: str) -> bytes:
    """A file's text (XML, HTML, JSON) as bytes, every registered secret replaced in each form
    the encoding may have given it (`&amp;`, `\\"`)."""
    return _secrets().redact_bytes(text.encode("utf-8"))


def redact_value(data: Any) -> Any:
    """JSON-like data with every registered secret replaced in its values, before encoding."""
    return _secrets().redact_value(data)


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
                secrets = _secrets()
                shown = [
                    escape_controls(secrets.redact(o)) if isinstance(o, str) else o for o in objects
                ]
                super().print(*shown, **kwargs)

            def print_json(self, json: str | None = None, *, data: Any = None, **kw: Any) -> None:
                # rich's own print_json writes its highlighted text without `print`: node text
                # would reach the terminal raw. The JSON is encoded here (escapes included) and
                # shown through `print`, which redacts and escapes what is left.
                text = json if json is not None else _dumps(redact_value(data))
                self.print(text, **kw)

        # rich honours NO_COLOR and drops styles when the stream is not a terminal.
        _consoles[name] = SafeConsole(
            stderr=name == "stderr", highlight=False, soft_wrap=True, markup=False
        )
    return _consoles[name]


def _dumps(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, default=str)


def emit_json(data: Any) -> None:
    """Write one JSON document to stdout, stable key order so runs diff cleanly; the secrets
    replaced in the values before encoding, as in the run folder."""
    sys.stdout.write(_dumps(redact_value(_plain(data))) + "\n")
    sys.stdout.flush()


def _plain(data: Any) -> Any:
    # Values json would only reach through `default=str` (paths, dates) are text to redact too.
    if isinstance(data, dict):
        return {k: _plain(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_plain(v) for v in data]
    if isinstance(data, str | int | float | bool) or data is None:
        return data
    return str(data)


def progress(message: str) -> None:
    """A progress line for a person watching; silent when stderr is not a terminal."""
    console = _console("stderr")
    if console.is_terminal:
        console.print(message)


def error_line(message: str) -> None:
    """One-line error on stderr, always shown."""
    first = escape_controls(redact(message.strip())).split("\n")
    text = "\n".join(first) if len(first) > 1 and _is_located(first) else first[0]
    sys.stderr.write(f"cluster-tool: {text}\n" if not _is_located(first) else text + "\n")
    sys.stderr.flush()


def _is_located(lines: list[str]) -> bool:
    # Spec problems already carry FILE:LINE:COL and are printed one per line, unprefixed.
    return all(line.count(":") >= 3 for line in lines)
