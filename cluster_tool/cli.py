"""The `cluster-tool` command: a thin Typer layer that parses, calls the library, prints."""

import os
import sys
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any

from cluster_tool import __version__, output
from cluster_tool.errors import EXIT_INTERRUPTED, EXIT_USAGE, ClusterToolError

if TYPE_CHECKING:
    import typer

_state = {"debug": False, "json": False}


def _print_version() -> None:
    if _state["json"]:
        import platform

        output.emit_json({"version": __version__, "python": platform.python_version()})
    else:
        print(f"cluster-tool {__version__}", flush=True)


def _version(value: bool) -> None:
    if value:
        import typer

        _print_version()
        raise typer.Exit(0)


# Each area registers its commands; see cluster_tool/commands/. A run registers only the area
# of the command it names (its first word below): the other areas, and the scan of installed
# distributions for extra ones, cost more than the command itself for `spec check`. Any other
# first word (an extra area's, a typo, none, `--help`) builds the whole app.
AREAS = (
    "parse",
    "spec",
    "plan",
    "gate",
    "checks",
    "workflows",
    "history",
    "versions",
    "watch",
    "profile",
    "contexts",
    "adopt",
)
AREA_OF = {
    "parse": "parse",
    "spec": "spec",
    "init": "spec",
    "render": "spec",
    "plan": "plan",
    "gate": "gate",
    "fabric": "checks",
    "validate": "checks",
    "node-check": "checks",
    "node-file": "checks",
    "preflight": "workflows",
    "bringup": "workflows",
    "reimage": "workflows",
    "validate-after": "workflows",
    "report": "workflows",
    "history": "history",
    "versions": "versions",
    "watch": "watch",
    "profile": "profile",
    "context": "contexts",
    "adopt": "adopt",
}

# Areas another distribution adds when it is installed: each entry point of this group names a
# `register(app)` (the lab's `lab` command comes from cluster-tool-lab, the `[lab]` extra).
# Without it, `cluster-tool lab` is an unknown command; the product never imports the lab.
EXTRA_AREAS_GROUP = "cluster_tool.commands"


def _area(name: str) -> ModuleType:
    return import_module(f"cluster_tool.commands.{name}")


def build_app(areas: tuple[str, ...] | None = None) -> "typer.Typer":
    """The root app with `areas` registered; None: every area, and the installed extra ones."""
    import typer

    app = typer.Typer(
        name="cluster-tool",
        help="Racked H100/H200 servers to a validated Slurm cluster.",
        no_args_is_help=True,
        add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish)
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    @app.callback()
    def root(
        debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
        version: Annotated[
            bool,
            typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
        ] = False,
        json_out: Annotated[
            bool,
            typer.Option("--json", help="With --version: as JSON (each command has its own)."),
        ] = False,
    ) -> None:
        """cluster-tool: one spec in, a converged and verified cluster out."""
        _state["debug"] = debug

    for name in AREAS if areas is None else areas:
        _area(name).register(app)
    if areas is None:
        _register_extra_areas(app)
    return app


def _register_extra_areas(app: "typer.Typer") -> None:
    from importlib import metadata

    for entry in metadata.entry_points(group=EXTRA_AREAS_GROUP):
        try:
            register = entry.load()
        except (
            ImportError
        ) as exc:  # its package is gone from this install: every other command works
            output.error_line(f"command area {entry.name!r} not loaded ({entry.value}): {exc}")
            continue
        register(app)


_APP: "typer.Typer | None" = None


def __getattr__(name: str) -> Any:
    # `cluster_tool.cli.app`, every area registered, built on first use (tests, completion).
    global _APP
    if name == "app":
        if _APP is None:
            _APP = build_app()
        return _APP
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _areas_for(args: list[str]) -> tuple[str, ...] | None:
    """The one area the arguments' command needs, or None when the whole app must be built."""
    if any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ):
        return None  # shell completion: every command is a candidate
    for arg in args:
        if arg == "--":
            return None
        if arg.startswith("-"):
            continue  # the root's options are flags: the first other word is the command
        area = AREA_OF.get(arg)
        return (area,) if area is not None else None
    return None


def _version_only(args: list[str]) -> bool:
    """`--version` with nothing but the root's flags: answered before Typer is imported."""
    return "--version" in args and set(args) <= {"--version", "--json", "--debug"}


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app and maps errors to one line and the contract's exit codes;
    with `--json`, stdout carries a summary on every exit (a failed command's says why)."""
    args = sys.argv[1:] if argv is None else argv
    _state["debug"] = "--debug" in args
    _state["json"] = _wants_json(args)
    output.reset()  # this command's secrets: the environment's, then those it learns
    if _version_only(args):
        _print_version()
        return 0
    app = build_app(_areas_for(args))
    code, error = _run(app, args)
    if _wants_json(args) and not output.json_emitted():
        output.emit_json(
            {
                "command": _command_name(app, args),
                "status": "pass" if code == 0 else "error",
                "exit_code": code,
                "error": error,
            }
        )
    return code


def _run(app: "typer.Typer", args: list[str]) -> tuple[int, str | None]:
    """The command's exit code, and the one line said on stderr when it failed."""
    import typer

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
            import traceback

            traceback.print_exc()
        return _failed(str(exc), exc.exit_code)
    except Exception as exc:  # the last line of defence: one line, traceback on --debug
        if _state["debug"]:
            import traceback

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


def _command_name(app: "typer.Typer", args: list[str]) -> str:
    """The command the arguments name (`fabric check`), as far as they name one."""
    import typer.main

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
