"""A cluster's context: what `lab up` (or an operator) records about reaching a cluster; the
command line wins over it, the environment over its secrets, and a context others can read is
refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cluster_tool.context import SiteContext, load_context, reach, remove_context, save_context
from cluster_tool.errors import UsageError
from tests.conftest import REPO


@pytest.fixture
def contexts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "contexts"
    monkeypatch.setenv("CLUSTER_TOOL_CONTEXT_DIR", str(folder))
    return folder


def lab_context() -> SiteContext:
    return SiteContext(
        cluster="lab",
        inventory="/srv/lab/inventory",
        ssh_config="/srv/lab/ssh_config",
        slurm_via="head",
        gate_workdir="/srv/lab/shared",
        env={"CLUSTER_TOOL_SLURMDBD_PASSWORD": "ctx-dbd-secret", "LAB_BMC_PASSWORD": "ctx-bmc"},
        written_by="test",
    )


def test_a_saved_context_is_private_and_fills_what_the_command_line_left_out(
    contexts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLUSTER_TOOL_SLURMDBD_PASSWORD", raising=False)
    monkeypatch.setenv("LAB_BMC_PASSWORD", "from-the-environment")
    path = save_context(lab_context())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(contexts.stat().st_mode) == 0o700
    via = reach("lab", ssh_config=Path("/mine/ssh_config"))
    assert via.ssh_config == Path("/mine/ssh_config")  # the command line wins
    assert (via.inventory, via.slurm_via, via.gate_workdir) == (
        Path("/srv/lab/inventory"),
        "head",
        Path("/srv/lab/shared"),
    )
    assert via.context == path
    assert os.environ["CLUSTER_TOOL_SLURMDBD_PASSWORD"] == "ctx-dbd-secret"
    assert os.environ["LAB_BMC_PASSWORD"] == "from-the-environment"  # the environment wins
    assert reach("other").context is None


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o602])
def test_a_context_others_can_read_or_write_is_refused(contexts: Path, mode: int) -> None:
    path = save_context(lab_context())
    path.chmod(mode)
    with pytest.raises(UsageError, match="mode 0600"):
        load_context("lab")


def test_a_symlinked_or_foreign_or_malformed_context_is_refused(contexts: Path) -> None:
    contexts.mkdir(mode=0o700)
    target = contexts / "elsewhere.json"
    target.write_text("{}")
    (contexts / "lab.json").symlink_to(target)
    with pytest.raises(UsageError, match="cannot read"):
        load_context("lab")
    (contexts / "lab.json").unlink()
    for text in ('{"cluster": "prod"}', '{"cluster": "lab", "shell": "rm -rf /"}', "[1]", "{"):
        (contexts / "lab.json").write_text(text)
        (contexts / "lab.json").chmod(0o600)
        with pytest.raises(UsageError, match="not a cluster context"):
            load_context("lab")


def test_remove_leaves_a_context_someone_else_wrote(contexts: Path) -> None:
    save_context(lab_context())
    assert not remove_context("lab", written_by="cluster-tool lab up (/tmp/other)")
    assert load_context("lab") is not None
    assert remove_context("lab", written_by="test")
    assert load_context("lab") is None


def test_the_cli_reaches_the_lab_through_its_context(
    contexts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gate --dry-run` on the lab's spec with no options: the context's Slurm host, SSH config
    are used."""
    from typer.testing import CliRunner

    from cluster_tool.cli import app

    # The context's secrets land in this process's environment: undone after the test.
    for name in lab_context().env:
        monkeypatch.delenv(name, raising=False)
    context = lab_context()
    context.gate_workdir = str(tmp_path / "shared")
    context.ssh_config = str(tmp_path / "ssh_config")
    save_context(context)
    seen: dict[str, object] = {}

    def slurm_via(host: str, ssh_config: Path | None) -> object:
        seen.update(host=host, ssh_config=ssh_config)
        raise UsageError("stop here")

    monkeypatch.setattr("cluster_tool.slurm.connect", slurm_via)
    result = CliRunner().invoke(
        app, ["gate", "--spec", str(REPO / "examples" / "lab.yml"), "--dry-run"]
    )
    assert seen == {"host": "head", "ssh_config": tmp_path / "ssh_config"}, result.output


def test_a_second_lab_of_the_same_name_leaves_the_running_labs_context(
    contexts: Path, tmp_path: Path
) -> None:
    """Two labs named `lab` on one machine (the test lab beside a molecule scenario's, a demo
    beside the tests): the first one up keeps the context; the second writes none and so takes
    none down; a context left by a lab that is gone is replaced."""
    from cluster_lab.config import LabConfig
    from cluster_lab.lifecycle import _remove_context, _write_context
    from cluster_lab.state import LabState
    from cluster_lab.topology import load_plan

    first = LabConfig.from_env(lab_dir=tmp_path / "first")
    second = LabConfig.from_env(lab_dir=tmp_path / "second")
    plan = load_plan(REPO / "examples" / "lab.yml", tmp_path / "inventory")
    first.lab_dir.mkdir()
    first.state_file.write_text("{}")  # the first lab is up
    written = _write_context(first, plan)
    assert written is not None and load_context("lab") is not None
    secrets = load_context("lab").env  # type: ignore[union-attr]
    assert _write_context(second, plan) is None
    second_state = LabState(prefix="x", bridge="x", subnet="x", lab_dir=str(second.lab_dir))
    assert not _remove_context(second, second_state)
    assert load_context("lab").env == secrets  # type: ignore[union-attr]
    first.state_file.unlink()  # the first lab is gone without `lab down`
    assert _write_context(second, plan) is not None
    assert load_context("lab").written_by.endswith(f"({second.lab_dir})")  # type: ignore[union-attr]
