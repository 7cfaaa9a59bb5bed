"""Typed errors the library raises; the CLI maps each to a one-line message and an exit code."""

from __future__ import annotations

from dataclasses import dataclass

# Exit codes are a contract (docs/architecture.md): scripts around the tool rely on them.
EXIT_OK = 0
EXIT_CHECKS_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130


class ClusterToolError(Exception):
    """Base of every error the library raises on purpose."""

    exit_code = EXIT_CHECKS_FAILED


class UsageError(ClusterToolError):
    """Bad input from the user: a missing file, a bad argument, a bad spec."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class SpecProblem:
    """One problem in a spec file, located as `FILE:LINE:COL: field.path: what is wrong`."""

    file: str
    line: int
    column: int
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class SpecError(UsageError):
    """A spec that does not validate; carries every problem found, not just the first."""

    def __init__(self, problems: list[SpecProblem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class ParseError(ClusterToolError):
    """Tool output a parser does not understand; names the line and what was expected."""

    exit_code = EXIT_USAGE

    def __init__(
        self,
        message: str,
        *,
        line_no: int | None = None,
        line: str | None = None,
        source: str | None = None,
    ) -> None:
        self.message = message
        self.line_no = line_no
        self.line = line
        self.source = source
        where = source or "<input>"
        if line_no is not None:
            where = f"{where}:{line_no}"
        text = f"{where}: {message}"
        if line is not None:
            shown = line if len(line) <= 120 else line[:117] + "..."
            text = f"{text}: {shown!r}"
        super().__init__(text)

    def with_source(self, source: str) -> ParseError:
        """The same error, naming the file it was read from."""
        return ParseError(self.message, line_no=self.line_no, line=self.line, source=source)


class UnreachableError(ClusterToolError):
    """Some hosts could not be reached over SSH."""

    exit_code = EXIT_UNREACHABLE
