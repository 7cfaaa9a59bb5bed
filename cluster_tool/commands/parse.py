"""`cluster-tool parse KIND FILE`: print what a parser sees in a captured output."""

from pathlib import Path
from typing import Annotated

import typer

from cluster_tool import output
from cluster_tool.commands._listing import help_with_listing
from cluster_tool.errors import ParseError, UsageError

_SUMMARY = "Parse a captured tool output."


def _kinds_help() -> str:
    # The parsers fill KINDS as they import: only `parse` and its --help load them.
    from cluster_tool.parsers import KINDS

    kinds = sorted(KINDS.values(), key=lambda k: k.name)
    return "Kinds:\n\n" + "\n\n".join(f"{k.name}: {k.help}" for k in kinds)


def parse(
    kind: Annotated[str, typer.Argument(help="Which tool output the file holds (see --help).")],
    file: Annotated[Path, typer.Argument(help="The captured output; '-' reads stdin.")],
    json_out: Annotated[bool, typer.Option("--json", help="Machine output on stdout.")] = False,
) -> int:
    """Parse a captured tool output and print the records the toolkit sees."""
    from cluster_tool.parsers import KINDS, to_jsonable

    if kind not in KINDS:
        raise UsageError(f"unknown kind {kind!r}; one of: {', '.join(sorted(KINDS))}")
    if str(file) == "-":
        import sys

        text = sys.stdin.read()
    else:
        try:
            text = file.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise UsageError(f"{file}: {exc.strerror or exc}") from exc
    try:
        records = to_jsonable(KINDS[kind].parse(text))
    except ParseError as exc:
        raise exc.with_source("<stdin>" if str(file) == "-" else str(file)) from exc
    if json_out:
        output.emit_json(records)
    else:
        output.stdout.print_json(data=records)
    return 0


def register(app: typer.Typer) -> None:
    command = app.command(
        "parse", cls=help_with_listing(_kinds_help), help=_SUMMARY, short_help=_SUMMARY
    )
    command(parse)
