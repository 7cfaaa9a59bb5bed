"""run_playbook against a tiny local playbook: counters from playbook_on_stats, no secret kept."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from cluster_tool.ansible import PlaybookEvent, run_playbook
from cluster_tool.errors import EXIT_CHECKS_FAILED, EXIT_OK, EXIT_UNREACHABLE, UsageError
from cluster_tool.workflows.runs import RunRecord

TINY = Path(__file__).parent / "playbooks" / "tiny.yml"


def _inventory(tmp_path: Path, hosts: dict[str, str]) -> Path:
    lines = ["[all]"]
    lines += [f"{name} {extra}" for name, extra in hosts.items()]
    lines += ["", "[all:vars]", f"ansible_python_interpreter={sys.executable}"]
    path = tmp_path / "hosts.ini"
    path.write_text("\n".join(lines) + "\n")
    return path


def _all_artifact_text(root: Path) -> str:
    chunks = []
    for path in root.rglob("*"):
        if path.is_file():
            chunks.append(path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(chunks)


def test_counts_per_host_come_from_the_stats_event(tmp_path: Path) -> None:
    inventory = _inventory(
        tmp_path,
        {"alpha": "ansible_connection=local", "beta": "ansible_connection=local tiny_fail=true"},
    )
    seen: list[PlaybookEvent] = []
    result = run_playbook(
        TINY, inventory, private_data_dir=tmp_path / "pdd", event_handler=seen.append
    )

    assert result.hosts["alpha"].changed == 1
    assert result.hosts["alpha"].failed == 0
    assert result.hosts["beta"].failed == 1
    assert result.failed_hosts == ["beta"]
    assert result.changed_hosts == ["alpha", "beta"]
    assert result.exit_code() == EXIT_CHECKS_FAILED
    failure = result.failures()[0]
    assert failure.host == "beta"
    assert failure.task == "Fail only on the host told to fail"
    assert failure.message == "beta was told to fail"
    # The handler saw the same events the result keeps, stats last.
    assert seen == result.events
    assert seen[-1].event == "playbook_on_stats"


def test_limit_and_check_mode(tmp_path: Path) -> None:
    inventory = _inventory(
        tmp_path,
        {"alpha": "ansible_connection=local", "beta": "ansible_connection=local tiny_fail=true"},
    )
    result = run_playbook(
        TINY, inventory, limit="alpha", check=True, private_data_dir=tmp_path / "pdd"
    )

    assert list(result.hosts) == ["alpha"]
    assert result.succeeded
    assert result.exit_code() == EXIT_OK
    # command is skipped in check mode, so nothing is reported changed.
    assert result.changed_total == 0


def test_unreachable_host_maps_to_exit_3(tmp_path: Path) -> None:
    inventory = _inventory(
        tmp_path,
        {
            "alpha": "ansible_connection=local",
            # Nothing listens on port 1: the SSH connection is refused at once.
            "ghost": "ansible_host=127.0.0.1 ansible_port=1 "
            "ansible_ssh_common_args='-o ConnectTimeout=2'",
        },
    )
    result = run_playbook(TINY, inventory, private_data_dir=tmp_path / "pdd")

    assert result.unreachable_hosts == ["ghost"]
    assert result.hosts["alpha"].unreachable == 0
    assert result.exit_code() == EXIT_UNREACHABLE
    assert any(e.unreachable and e.host == "ghost" for e in result.events)


def test_secrets_reach_the_host_but_no_artifact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "munge-S3CR3T-7f3a9c"
    env_secret = "slurmdbd-Pa55-91bd"
    monkeypatch.setenv("TINY_DB_PASSWORD", env_secret)
    out = tmp_path / "out"
    out.mkdir()
    inventory = _inventory(tmp_path, {"alpha": "ansible_connection=local"})
    pdd = tmp_path / "pdd"

    result = run_playbook(
        TINY,
        inventory,
        extravars={"tiny_secret": secret, "tiny_secret_dir": str(out)},
        envvars={"ANSIBLE_FORCE_COLOR": "0"},
        private_data_dir=pdd,
    )

    assert result.succeeded
    # The secrets did their job on the host ...
    assert (out / "alpha.secret").read_text() == secret
    assert (out / "alpha.envsecret").read_text() == env_secret
    assert oct((out / "alpha.secret").stat().st_mode & 0o777) == "0o400"
    # ... and appear nowhere in what the run keeps.
    kept = _all_artifact_text(pdd)
    assert secret not in kept
    assert env_secret not in kept
    # No env/ file is left: neither ansible-runner's (envvars, passwords) nor the extra vars.
    assert list((pdd / "env").iterdir()) == []
    # The no_log tasks still show up, censored.
    assert any(e.task and "secret" in e.task for e in result.events)


def test_missing_playbook_or_inventory_is_a_usage_error(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path, {"alpha": "ansible_connection=local"})
    with pytest.raises(UsageError, match="no such playbook"):
        run_playbook(tmp_path / "nope.yml", inventory, private_data_dir=tmp_path / "pdd")
    with pytest.raises(UsageError, match="no such inventory"):
        run_playbook(TINY, tmp_path / "nope.ini", private_data_dir=tmp_path / "pdd")


def test_a_rendered_inventory_folder_runs_from_its_hosts_yml(tmp_path: Path) -> None:
    folder = tmp_path / "inventory"
    (folder / "group_vars").mkdir(parents=True)
    (folder / "hosts.yml").write_text(
        "all:\n  hosts:\n    alpha:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
    )
    (folder / "group_vars" / "all.yml").write_text("tiny_fail: true\n")
    # Not inventory: would be parsed as a broken inventory source if the folder were used.
    (folder / "spec.json").write_text('{"software": {"slurm_version": "24.05.5"}}')
    result = run_playbook(TINY, folder, private_data_dir=tmp_path / "pdd")

    assert list(result.hosts) == ["alpha"]
    # group_vars next to hosts.yml still apply.
    assert result.failed_hosts == ["alpha"]


PROBE = Path(__file__).parent / "playbooks" / "secret_probe.yml"


def _files_holding(root: Path, needles: tuple[str, ...], skip: Path | None = None) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        if skip is not None and path.is_relative_to(skip):
            continue
        if path.is_file() and not path.is_symlink():
            text = path.read_text(encoding="utf-8", errors="replace")
            if any(n in text for n in needles):
                found.append(path)
    return found


def test_no_secret_file_outside_the_run_during_or_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "dbd-Pa55-extravar-4e1c"
    env_secret = "bmc-Pa55-environ-88ad"
    # Whatever the wrapper puts under the temp folder lands here, where the test can look.
    watched_tmp = tmp_path / "tmp"
    watched_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(watched_tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    record = RunRecord.create(tmp_path / "runs", "converge", {})
    pdd = record.path / "ansible"
    inventory = _inventory(tmp_path, {"alpha": "ansible_connection=local"})
    needles = (secret, env_secret)
    during: list[list[Path]] = []
    inside: list[Path] = []

    def look_while_running(event: PlaybookEvent) -> None:
        if event.event != "playbook_on_task_start":
            return
        # Anywhere but the run's own folder: the test's whole tree and the temp folder.
        during.append(_files_holding(tmp_path, needles, skip=record.path))
        inside.extend(_files_holding(pdd, needles))

    result = run_playbook(
        PROBE,
        inventory,
        extravars={
            "probe_secret": secret,
            "probe_secret_sha1": hashlib.sha1(secret.encode()).hexdigest(),
            "probe_env_sha1": hashlib.sha1(env_secret.encode()).hexdigest(),
        },
        # A name the artifact filter would not guess is a secret: only the parameter keeps it out.
        secret_envvars={"PROBE_DBD_WORD": env_secret},
        private_data_dir=pdd,
        event_handler=look_while_running,
    )

    assert result.succeeded, [e.message for e in result.failures()]
    assert during == [[]]
    # While it ran, the extra vars sat in the run's own data dir, private, and nowhere else.
    # (the `command` artifact is cut down before ansible-playbook starts, so it is not here).
    assert [p.parent for p in inside] == [pdd / "env"]
    # After it: nothing outside the run, and nothing in the run record (no scrub needed).
    assert _files_holding(tmp_path, needles, skip=record.path) == []
    assert _files_holding(record.path, needles) == []
    assert list((pdd / "env").iterdir()) == []
    assert "PROBE_DBD_WORD" not in _all_artifact_text(pdd)


def test_extravars_file_is_private_while_the_run_holds_it(tmp_path: Path) -> None:
    pdd = tmp_path / "pdd"
    inventory = _inventory(tmp_path, {"alpha": "ansible_connection=local"})
    modes: list[str] = []

    def look(event: PlaybookEvent) -> None:
        if event.event == "playbook_on_task_start":
            modes.extend(oct(p.stat().st_mode & 0o777) for p in (pdd / "env").iterdir())
            modes.append(oct((pdd / "env").stat().st_mode & 0o777))

    result = run_playbook(
        TINY, inventory, extravars={"tiny_fail": False}, private_data_dir=pdd, event_handler=look
    )

    assert result.succeeded
    assert set(modes) == {"0o600", "0o700"}


def test_a_killed_drivers_extravars_are_swept_by_the_next_run(tmp_path: Path) -> None:
    pdd = tmp_path / "pdd"
    env_dir = pdd / "env"
    env_dir.mkdir(parents=True, mode=0o700)
    gone = subprocess.Popen(["true"])
    gone.wait()
    # Left by a driver killed with -9: its pid is gone.
    stale = env_dir / f"extravars-{gone.pid}-0badf00d.json"
    stale.write_text('{"slurm_dbd_storage_pass": "left-behind-Pa55"}')
    # Held by a run that is still going (this process): not ours to remove.
    live = env_dir / f"extravars-{os.getpid()}-0000beef.json"
    live.write_text("{}")
    inventory = _inventory(tmp_path, {"alpha": "ansible_connection=local"})

    result = run_playbook(TINY, inventory, extravars={"tiny_fail": False}, private_data_dir=pdd)

    assert result.succeeded
    assert sorted(p.name for p in env_dir.iterdir()) == [live.name]


def test_facts_are_cached_across_runs_of_one_inventory_and_forgotten_per_host(
    tmp_path: Path,
) -> None:
    from cluster_tool.ansible.runner import fact_cache_dir, forget_facts

    playbook = tmp_path / "facts.yml"
    playbook.write_text("- hosts: all\n  gather_facts: true\n  gather_subset: [min]\n  tasks: []\n")
    inventory = _inventory(tmp_path, {"n1": "ansible_connection=local"})
    cache = tmp_path / "facts"
    first = run_playbook(playbook, inventory, private_data_dir=tmp_path / "a", fact_cache=cache)
    assert first.succeeded and [p.name for p in cache.iterdir()] == ["s1_n1"], "cached"
    second = run_playbook(playbook, inventory, private_data_dir=tmp_path / "b", fact_cache=cache)
    gathered = [e for e in second.events if e.task == "Gathering Facts"]
    assert second.succeeded and not gathered, "the second run reads them from the cache"
    # The default cache is keyed by the inventory: two clusters may both have a gpu001.
    other = tmp_path / "other" / "hosts.ini"
    other.parent.mkdir()
    other.write_text(inventory.read_text())
    assert fact_cache_dir(inventory) != fact_cache_dir(other)
    assert fact_cache_dir(inventory) == fact_cache_dir(str(inventory))
    default = fact_cache_dir(inventory)
    default.mkdir(parents=True, exist_ok=True)
    for name in ("s1_n1", "n1", "s1_n2", "s1_n10"):
        (default / name).write_text("{}")
    forget_facts(inventory, ["n1"])
    assert sorted(p.name for p in default.iterdir()) == ["s1_n10", "s1_n2"]
    forget_facts(inventory, ["n2", "n10", "never-there"])
    default.rmdir()
