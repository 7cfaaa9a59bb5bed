"""What `cluster-tool` imports to start: the command areas declare their commands and load their
libraries inside them, so `--version`, `--help` and Slurm's HealthCheckProgram (`node-check`)
start without ansible-runner, sushy, the gate or the renderer (benchmarks/cli_startup.py
has the timings)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import cluster_tool
import cluster_tool.parsers

EXAMPLE_1SU = Path(__file__).resolve().parents[2] / "examples" / "h100-1su.yml"

# Each is a library only some commands use; none may load just to declare the commands.
HEAVY_FOR_EVERY_START = (
    "ansible_runner",
    "sushy",
    "paramiko",
    "jinja2",
    "yaml",
    "pydantic",
    "ClusterShell",
    "cluster_tool.gate.ladder",
    "cluster_tool.gate.simulate",
    "cluster_tool.render.engine",
    "cluster_tool.findings",
    "cluster_tool.spec",
    "cluster_tool.parsers",
    "cluster_tool.plan.search",
    "cluster_tool.workflows",
    "cluster_lab.sim",
    "cluster_tool.slurm",
)

# The node checks read nvidia-smi, topo, ibstat, dcgmi and the kernel log; nothing else.
NOT_FOR_NODE_CHECK = (
    "ansible_runner",
    "sushy",
    "jinja2",
    "yaml",
    "cluster_tool.gate.ladder",
    "cluster_tool.gate.simulate",
    "cluster_tool.render",
    "cluster_tool.spec.loader",
    "cluster_tool.parsers.ibnetdiscover",
    "cluster_tool.parsers.iblinkinfo",
    "cluster_tool.parsers.nccl_tests",
)

# Where the lab is installed, its `lab` command is registered at every start (its entry point);
# the lab's own library never loads for that.
LAB_REGISTRATION = {"cluster_lab", "cluster_lab.cli", "cluster_lab.cli_faults"}


def _lab_library(modules: set[str]) -> list[str]:
    return sorted(
        m for m in modules if m.split(".")[0] == "cluster_lab" and m not in LAB_REGISTRATION
    )


def _modules_after(code: str) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    """sys.modules of a fresh interpreter after `code`, printed as the last line of stdout."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.stdout.strip(), proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1])), proc


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules for n in names if m == n or m.startswith(n + "."))


def test_importing_the_cli_loads_no_command_library() -> None:
    modules, _ = _modules_after("import cluster_tool.cli\ncluster_tool.cli.app")
    assert "cluster_tool.commands.workflows" in modules  # every area registered
    # rich too: output's consoles are made on first use.
    assert _loaded(modules, (*HEAVY_FOR_EVERY_START, "rich")) == []
    assert _lab_library(modules) == []


# Once a sub-command runs, typer coerces the root's options through pydantic TypeAdapters.
BELOW_A_GROUP = tuple(n for n in HEAVY_FOR_EVERY_START if n != "pydantic")


@pytest.mark.parametrize(
    ("argv", "heavy"),
    [
        (["--version"], (*HEAVY_FOR_EVERY_START, "rich")),
        (["--help"], HEAVY_FOR_EVERY_START),
        (["lab", "--help"], BELOW_A_GROUP),
    ],
)
def test_version_and_help_load_no_command_library(argv: list[str], heavy: tuple[str, ...]) -> None:
    code = (
        "import contextlib, io\n"
        "from cluster_tool.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main({argv!r})\n"
        "print(code)\n"
    )
    modules, proc = _modules_after(code)
    assert proc.stdout.splitlines()[0] == "0", proc.stderr
    assert _loaded(modules, heavy) == []


def test_version_starts_without_typer_or_any_command_area() -> None:
    # `--version` alone is answered before the app is built: no Typer, no area, no scan of the
    # installed distributions for extra areas.
    code = (
        "import contextlib, io\n"
        "from cluster_tool.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    code = main(['--version'])\n"
        "print(code, out.getvalue().strip())\n"
    )
    modules, proc = _modules_after(code)
    assert proc.stdout.splitlines()[0] == f"0 cluster-tool {cluster_tool.__version__}"
    assert _loaded(modules, ("typer", "click", "rich", "importlib.metadata")) == []
    assert _loaded(modules, ("cluster_tool.commands",)) == []


def test_a_command_registers_only_its_own_area(tmp_path: Path) -> None:
    # `spec check` builds the app with the spec area alone: the planner, the gate, the
    # workflows and the extra areas' entry points are not loaded to run it.
    code = (
        "import contextlib, io\n"
        "from cluster_tool.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main(['spec', 'check', {str(EXAMPLE_1SU)!r}])\n"
        "print(code)\n"
    )
    modules, proc = _modules_after(code)
    assert proc.stdout.splitlines()[0] == "0", proc.stderr
    areas = [m for m in modules if m.startswith("cluster_tool.commands.")]
    assert [m for m in areas if not m.split(".")[-1].startswith("_")] == [
        "cluster_tool.commands.spec"
    ]
    assert _loaded(modules, ("cluster_tool.plan", "cluster_tool.gate", "cluster_lab")) == []


def test_the_area_of_every_command_is_the_one_that_registers_it() -> None:
    # The first word of a command picks the one area registered for the run: the table must
    # name, for every command each area registers, that area, and nothing else.
    import typer
    import typer.main

    from cluster_tool import cli

    registered = {}
    for area in cli.AREAS:
        app = typer.Typer()
        app.callback()(lambda: None)
        cli._area(area).register(app)
        for name in typer.main.get_command(app).commands:  # type: ignore[attr-defined]
            registered[name] = area
    assert registered == cli.AREA_OF


@pytest.mark.parametrize(
    "argv",
    [
        ["spec", "check", str(EXAMPLE_1SU)],
        ["--json", "spec", "check", str(EXAMPLE_1SU)],
        ["--json", "spec", "check", "NOPE.yml"],
        ["--debug", "fabric", "check"],
        ["fabric", "check", "--help"],
        ["gate", "simulate", "--help"],
        ["spec", "chek"],
    ],
)
def test_one_area_runs_a_command_as_the_whole_app_does(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from cluster_tool import cli

    one = (cli.main(argv), *capsys.readouterr())
    monkeypatch.setattr(cli, "_areas_for", lambda args: None)
    whole = (cli.main(argv), *capsys.readouterr())
    assert one == whole


def test_node_check_loads_only_what_the_node_checks_need(tmp_path: Path) -> None:
    missing = tmp_path / "node.json"
    code = (
        "from cluster_tool.cli import main\n"
        f"code = main(['node-check', '--slurm', '--node-file', {str(missing)!r}])\n"
        "print(code)\n"
    )
    modules, proc = _modules_after(code)
    # It ran the node-check path (and stopped at the missing node file, a usage error).
    assert proc.stdout.splitlines()[0] == "2"
    assert "no node file" in proc.stderr
    assert "cluster_tool.checks.node" in modules
    assert _loaded(modules, NOT_FOR_NODE_CHECK) == []
    # Its own workflow (probe, judge, drain or resume) and no other.
    workflows = {m for m in modules if m.split(".")[:2] == ["cluster_tool", "workflows"]}
    assert workflows <= {"cluster_tool.workflows", "cluster_tool.workflows.node_check"}
    assert _lab_library(modules) == []


def test_command_parameters_are_declared_as_objects_not_strings() -> None:
    # typer compiles and evaluates string annotations on every run, for every parameter of every
    # command (`from __future__ import annotations` in a commands module makes them strings).
    import typer.main

    from cluster_tool.cli import app

    group = typer.main.get_command(app)
    stringly = []
    stack = [group]
    while stack:
        command = stack.pop()
        stack.extend(getattr(command, "commands", {}).values())
        callback = getattr(command.callback, "__wrapped__", command.callback)
        for name, annotation in getattr(callback, "__annotations__", {}).items():
            if isinstance(annotation, str):
                stringly.append(f"{command.name}: {name}")
    assert stringly == []


def test_every_parser_module_is_listed_for_the_parse_command() -> None:
    # KINDS loads the modules listed in cluster_tool.parsers.MODULES; one left out would be
    # missing from `cluster-tool parse` without anything failing.
    folder = Path(cluster_tool.parsers.__file__).parent
    registering = sorted(p.stem for p in folder.glob("*.py") if "@parser(" in p.read_text())
    assert registering == sorted(cluster_tool.parsers.MODULES)


@pytest.mark.parametrize(
    ("argv", "listed"),
    [
        (["parse", "--help"], "parser kinds"),
        (["lab", "inject", "--help"], "faults"),
    ],
)
def test_help_still_lists_what_loads_late(
    argv: list[str], listed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from cluster_lab.faults import FAULTS
    from cluster_tool.cli import main
    from cluster_tool.parsers import KINDS

    names = sorted(KINDS) if listed == "parser kinds" else sorted(FAULTS)
    assert main(argv) == 0
    shown = capsys.readouterr().out
    assert [n for n in names if f"{n}:" not in shown and f"{n} " not in shown] == []
