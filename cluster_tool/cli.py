"""The `cluster-tool` command: a thin Typer layer that parses, calls the library, prints."""

import sys
import traceback
from importlib import metadata
from typing import Annotated

import typer

from cluster_tool import __version__, output
from cluster_tool.commands import checks as checks_commands
from cluster_tool.commands import gate as gate_commands
from cluster_tool.commands import history as history_commands
from cluster_tool.commands import parse as parse_commands
from cluster_tool.commands import plan as plan_commands
from cluster_tool.commands import spec as spec_commands
from cluster_tool.commands import versions as versions_commands
from cluster_tool.commands import watch as watch_commands
from cluster_tool.commands import workflows as workflow_commands
from cluster_tool.errors import EXIT_INTERRUPTED, EXIT_USAGE, ClusterToolError

app = typer.Typer(
    name="cluster-tool",
    help="Racked H100/H200 servers to a validated Slurm cluster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_state = {"debug": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cluster-tool {__version__}")
        raise typer.Exit(0)


@app.callback()
def root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """cluster-tool: one spec in, a converged and verified cluster out."""
    _state["debug"] = debug


# Each area registers its commands; see cluster_tool/commands/.
_AREAS: tuple = (
    parse_commands,
    spec_commands,
    plan_commands,
    gate_commands,
    checks_commands,
    workflow_commands,
    history_commands,
    versions_commands,
    watch_commands,
)
for _module in _AREAS:
    _module.register(app)

# Areas another distribution adds when it is installed: each entry point of this group names a
# `register(app)` (the lab's `lab` command comes from cluster-tool-lab, the `[lab]` extra).
# Without it, `cluster-tool lab` is an unknown command; the product never imports the lab.
EXTRA_AREAS_GROUP = "cluster_tool.commands"
for _entry in metadata.entry_points(group=EXTRA_AREAS_GROUP):
    try:
        _register = _entry.load()
    except ImportError as _exc:  # its package is gone from this install: every other command works
        output.error_line(f"command area {_entry.name!r} not loaded ({_entry.value}): {_exc}")
        continue
    _register(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app and maps errors to one line and the contract's exit codes."""
    args = sys.argv[1:] if argv is None else argv
    _state["debug"] = "--debug" in args
    output.reset()  # this command's secrets: the environment's, then those it learns
    try:
        result = app(args=args, prog_name="cluster-tool", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        return EXIT_INTERRUPTED
    except typer.TyperException as exc:  # usage errors from the argument parser
        output.error_line(exc.format_message())
        return exc.exit_code or EXIT_USAGE
    except KeyboardInterrupt:
        output.error_line("interrupted")
        return EXIT_INTERRUPTED
    except ClusterToolError as exc:
        if _state["debug"]:
            traceback.print_exc()
        output.error_line(str(exc))
        return exc.exit_code
    except Exception as exc:  # the last line of defence: one line, traceback on --debug
        if _state["debug"]:
            traceback.print_exc()
        output.error_line(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug)")
        return 1
    return result if isinstance(result, int) else 0
