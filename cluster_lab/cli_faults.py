"""`cluster-tool lab inject KIND ARGS…` and `lab heal [FAULT-ID|--all]`: faults in the lab."""

import inspect
from typing import Annotated, Any

import typer

from cluster_tool import output
from cluster_tool.commands._listing import help_with_listing
from cluster_tool.errors import UsageError

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine output on stdout.")]


def _kinds() -> str:
    # The fault registry pulls in the lab's simulators: loaded by `inject` and its --help only.
    from cluster_lab.faults import FAULTS

    return "\n".join(f"  {k.name} {' '.join(k.args)}: {k.help}" for k in FAULTS.values())


def inject(
    kind: Annotated[str, typer.Argument(help="Fault kind (listed above).")],
    args: Annotated[list[str] | None, typer.Argument(help="The fault's arguments.")] = None,
    width: Annotated[
        str | None, typer.Option("--width", help="link-degrade: the width, 1X or 2X.")
    ] = None,
    symbol: Annotated[
        int | None, typer.Option("--symbol", help="port-errors: SymbolErrorCounter value.")
    ] = None,
    count: Annotated[int, typer.Option("--count", help="gpu-ecc: how many errors.")] = 1,
    hang: Annotated[
        bool, typer.Option("--hang", help="link-down: NCCL hangs instead of failing.")
    ] = False,
    json_out: JsonOpt = False,
) -> int:
    """Inject a fault into the running lab; every tool that shows the hardware shows it."""
    from cluster_lab.config import LabConfig
    from cluster_lab.faults import FAULTS, operator_view
    from cluster_lab.live_faults import inject_fault

    if kind not in FAULTS:
        raise UsageError(f"unknown fault {kind!r}; faults:\n{_kinds()}")
    expected = FAULTS[kind].args
    given = list(args or [])
    required = [a for a in expected if not a.startswith("[")]  # `[DEVICE]` may be left out
    if not len(required) <= len(given) <= len(expected):
        raise UsageError(f"usage: lab inject {kind} {' '.join(expected)}")
    options: dict[str, Any] = {}
    if kind == "link-degrade":
        if width is None:
            raise UsageError("link-degrade needs --width 1X or 2X")
        options["width"] = width
    if kind == "port-errors":
        if symbol is None:
            raise UsageError("port-errors needs --symbol N")
        options["symbol"] = symbol
    if kind == "gpu-ecc":
        options["count"] = count
    if kind == "link-down" and hang:
        options["hang"] = True
    record = inject_fault(LabConfig.from_env(), kind, *given, **options)
    if json_out:
        output.emit_json(operator_view(record))
    else:
        output.stdout.print(f"{record['id']}: {kind} {record['target']}")
    return 0


def heal(
    fault_id: Annotated[str | None, typer.Argument(help="The fault to undo (lab status).")] = None,
    all_faults: Annotated[bool, typer.Option("--all", help="Undo every active fault.")] = False,
    json_out: JsonOpt = False,
) -> int:
    """Undo an injected fault (or all of them, newest first)."""
    from cluster_lab.config import LabConfig
    from cluster_lab.live_faults import heal_faults

    if (fault_id is None) == (not all_faults):
        raise UsageError("name one FAULT-ID or give --all")
    healed = heal_faults(LabConfig.from_env(), None if all_faults else fault_id)
    if json_out:
        output.emit_json({"healed": [f["id"] for f in healed]})
    elif healed:
        for record in healed:
            output.stdout.print(f"healed {record['id']}: {record['kind']} {record['target']}")
    else:
        output.stdout.print("no active faults")
    return 0


def add_to(lab_app: typer.Typer) -> None:
    """Add `inject` and `heal` to the `lab` command group."""
    summary = inspect.getdoc(inject)
    listing = help_with_listing(lambda: f"Faults:\n\n{_kinds()}")
    lab_app.command("inject", cls=listing, short_help=summary)(inject)
    lab_app.command("heal")(heal)
