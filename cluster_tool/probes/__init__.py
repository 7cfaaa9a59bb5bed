"""Probes: each a read-only command on a node and how its output is read, in one class.

A probe has pyinfra's fact shape, `command()` and `process(output)` with the output as lines,
without pyinfra itself: run through pyinfra's API it was slower than the tool's own transports
(benchmarks/fanout.py), which carry every probe of a node in one script (remote/probes.py).
`process` calls the probe's pure parser in `cluster_tool.parsers`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cluster_tool.errors import ParseError

__all__ = ["Probe", "ProbeOutput", "Readings", "Shell", "lines"]


@dataclass(frozen=True)
class ProbeOutput:
    """What one probe printed, and how it ended (127: the tool is not installed)."""

    rc: int
    stdout: str
    stderr: str = ""

    @property
    def not_installed(self) -> bool:
        return self.rc in (126, 127)


def lines(text: str) -> list[str]:
    """`text` as a fact's output lines; `"\\n".join` gives the text back byte for byte."""
    return text.split("\n")


class Probe:
    """One read-only command, the name its output is filed under, and its reader.

    `check` is the finding id that answers for the probe when its tool is missing, fails or
    prints something unreadable, `what` how that finding names it; `reads_failed_runs` says its
    output is read even when the tool exits non-zero (DCGM's diag exits 1 on a failed test).
    """

    name: str
    timeout_s: int = 120
    check: str | None = None  # None: os.<name>
    what: str | None = None  # None: the name
    reads_failed_runs: bool = False

    def command(self) -> str:
        raise NotImplementedError

    def process(self, output: list[str]) -> Any:
        """The parsed record; the default is the text itself."""
        return "\n".join(output)

    def read_anyway(self, output: ProbeOutput) -> bool:
        """Whether `output` is a reading: a clean exit, or a failed one this probe still reads
        (`reads_failed_runs`) when it printed something."""
        return output.rc == 0 or (self.reads_failed_runs and bool(output.stdout.strip()))

    @property
    def check_id(self) -> str:
        return self.check or f"os.{self.name}"

    @property
    def described(self) -> str:
        return self.what or self.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Shell(Probe):
    """A probe made on the spot from a name and a command; its output is kept as text."""

    def __init__(self, name: str, command: str, timeout_s: int = 120) -> None:
        self.name, self._command, self.timeout_s = name, command, timeout_s

    def command(self) -> str:
        return self._command

    def __repr__(self) -> str:
        return f"Shell({self.name!r}, {self._command!r}, timeout_s={self.timeout_s})"


class Readings:
    """One node's probe outputs, each parsed at most once however many checks read it (the
    health checks and the version checks both read `nvidia-smi -q`, 40 kB a node)."""

    def __init__(self, outputs: Mapping[str, ProbeOutput]) -> None:
        self.outputs = outputs
        self._read: dict[str, Any] = {}
        self._unreadable: dict[str, ParseError] = {}

    def read(self, probe: Probe) -> Any:
        """`probe.process` over its output (KeyError when it was not collected); the same
        ParseError, each time it is asked, when the output cannot be read. Keyed by the probe's
        name: one output per name, whichever probe of that name reads it."""
        name = probe.name
        if name in self._unreadable:
            raise self._unreadable[name]
        if name not in self._read:
            try:
                self._read[name] = probe.process(lines(self.outputs[name].stdout))
            except ParseError as exc:
                self._unreadable[name] = exc
                raise
        return self._read[name]
