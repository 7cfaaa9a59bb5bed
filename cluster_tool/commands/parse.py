"""`cluster-tool parse KIND FILE`: print what a parser sees in a captured output."""

from pathlib import Path
from typing import Annotated

import typer

from cluster_tool import output
from cluster_tool.commands._listing import help_with_listing
from cluster_tool.errors import EXIT_CHECKS_FAILED, ParseError, UsageError

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
    lines: Annotated[
        bool,
        typer.Option(
            "--lines",
            help="Print {records, lines}: per host, how many lines the parser consumed, "
            "skipped as known noise, could not read, and set aside before the tool's output.",
        ),
    ] = False,
) -> int:
    """Parse a captured tool output and print the records the toolkit sees.

    Captures may carry a prompt line, colour codes, CRLF, pdsh/clush `host: ` or Open MPI
    `[1,0]<stdout>:` prefixes. A capture of several hosts prints one record set per host
    (Xid events: one list, each event naming its host). Exit 1: read, with errors (the
    records read are printed, each unreadable line is named on stderr); exit 2: not this
    tool's output at all. With --lines the records come under `records`, beside a `lines`
    list that accounts for every line of the file once, per host.
    """
    from cluster_tool.parsers import KINDS, to_jsonable

    if kind not in KINDS:
        raise UsageError(f"unknown kind {kind!r}; one of: {', '.join(sorted(KINDS))}")
    source = "<stdin>" if str(file) == "-" else str(file)
    from cluster_tool.fileio import max_input_bytes, read_input_bytes

    if str(file) == "-":
        import sys

        cap = max_input_bytes()
        binary = getattr(sys.stdin, "buffer", None)  # absent when stdin is a text stream
        data = binary.read(cap + 1) if binary else sys.stdin.read(cap + 1).encode()
        if len(data) > cap:
            raise UsageError(f"<stdin>: over the input limit of {cap} bytes")
    else:
        data = read_input_bytes(file)
    # Tool output is kept as it came: bytes that are not UTF-8 are replaced, not refused.
    text = data.decode("utf-8", errors="replace")
    parser_kind = KINDS[kind]
    try:
        reading = parser_kind.read(text)
    except ParseError as exc:
        raise exc.with_source(source) from exc
    hosts = reading.hosts
    if len(hosts) == 1 and hosts[0].host is None:
        records = hosts[0].records
    elif parser_kind.merge is not None:
        records = parser_kind.merge([(h.host, h.records) for h in hosts if h.records is not None])
    else:
        records = {h.host: h.records for h in hosts}
    data = to_jsonable(records)
    if lines:
        data = {
            "records": data,
            "lines": [{"host": h.host, **h.line_counts} for h in hosts],
        }
    if json_out:
        output.emit_json(data)
    else:
        output.stdout.print_json(data=data)
    for host in hosts:
        skipped = host.skipped_lines
        if skipped is not None:
            output.error_line(
                f"{source}:{skipped.first_line_no}: note: {skipped.count} line(s) before the "
                f"{kind} output not read, the first: {skipped.first_line!r}"
            )
    errors = [(None, e) for e in reading.errors] + [(h.host, e) for h in hosts for e in h.errors]
    for name, error in errors:
        where = f"{source}:{error.line_no}" if error.line_no is not None else source
        on = f" ({name})" if name is not None else ""
        shown = f": {error.line!r}" if error.line is not None else ""
        output.error_line(f"{where}:{on} {error.message}{shown}")
    return EXIT_CHECKS_FAILED if errors else 0


def register(app: typer.Typer) -> None:
    command = app.command(
        "parse", cls=help_with_listing(_kinds_help), help=_SUMMARY, short_help=_SUMMARY
    )
    command(parse)
