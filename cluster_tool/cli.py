"""The `cluster-tool` command: a thin Typer layer that parses, calls the library, prints."""

import sys
import traceback
from importlib import metadata
from typing import Annotated

import typer

from cluster_tool import __version__, output
from cluster_tool.commands import adopt as adopt_commands
from cluster_tool.commands import checks as checks_commands
from cluster_tool.commands import contexts as context_commands
from cluster_tool.commands import gate as gate_commands
from cluster_tool.commands import history as history_commands
from cluster_tool.commands import parse as parse_commands
from cluster_tool.commands import plan as plan_commands
from cluster_tool.commands import profile as profile_commands
from cluster_tool.commands import spec as spec_commands
from cluster_tool.commands import versions as versions_commands
from cluster_tool.commands import watch as watch_commands
from cluster_tool.commands import workflows as workflow_commands
from cluster_tool.errors import EXIT_INTERRUPTED, EXIT_USAGE, ClusterToolError

app = typer.Typer(
    name="cluster-tool",
    help="Racked H100/H200 servers to a validated Slurm cluster.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish)
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_state = {"debug": False, "json": False}


def _version(value: bool) -> None:
    if value:
        if _state["json"]:
            import platform

            output.emit_json({"version": __version__, "python": platform.python_version()})
        else:
            typer.echo(f"cluster-tool {__version__}")
        raise typer.Exit(0)


@app.callback()
def root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="With --version: as JSON (each command has its own).")
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
    profile_commands,
    context_commands,
    adopt_commands,
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
    """Entry point: runs the app and maps errors to one line and the contract's exit codes;
    with `--json`, stdout carries a summary on every exit (a failed command's says why)."""
    args = sys.argv[1:] if argv is None else argv
    _state["debug"] = "--debug" in args
    _state["json"] = _wants_json(args)
    output.reset()  # this command's secrets: the environment's, then those it learns
    code, error = _run(args)
    if _wants_json(args) and not output.json_emitted():
        output.emit_json(
            {
                "command": _command_name(args),
                "status": "pass" if code == 0 else "error",
                "exit_code": code,
                "error": error,
            }
        )
    return code


def _run(args: list[str]) -> tuple[int, str | None]:
    """The command's exit code, and the one line said on stderr when it failed."""
    try:
        result = app(args=args, prog_name="cluster-tool", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code, None
    except typer.Abort:
        return EXIT_INTERRUPTED, "interrupted"
    except typer.TyperException as exc:  # usage errors from the argument parser
        return _failed(exc.format_message(), exc.exit_code or EXIT_USAGE)
    except KeyboardInterrupt:
        return _failed("interrupted", EXIT_INTERRUPTED)
    except ClusterToolError as exc:
        if _state["debug"]:
            traceback.print_exc()
        return _failed(str(exc), exc.exit_code)
    except Exception as exc:  # the last line of defence: one line, traceback on --debug
        if _state["debug"]:
            traceback.print_exc()
        return _failed(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug)", 1)
    return (result if isinstance(result, int) else 0), None


def _failed(message: str, code: int) -> tuple[int, str]:
    output.error_line(message)
    return code, message


def _wants_json(args: list[str]) -> bool:
    # Options end at `--`; after it `--json` would be a value (a file name), not the flag.
    options = args[: args.index("--")] if "--" in args else args
    return "--json" in options


def _command_name(args: list[str]) -> str:
    """The command the arguments name (`fabric check`), as far as they name one."""
    commands = getattr(typer.main.get_command(app), "commands", {})
    words: list[str] = []
    for arg in args:
        if arg.startswith("-"):
            continue
        if arg not in commands:
            break
        words.append(arg)
        commands = getattr(commands[arg], "commands", {})  # a group's (`fabric`), else none
    return " ".join(words)
