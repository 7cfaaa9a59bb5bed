"""Runs a playbook through ansible-runner; per-host results come from `playbook_on_stats`.

Secrets never reach the artifacts this keeps: they travel in the environment of the
ansible-playbook process (`secret_envvars`, read by the roles with `lookup('ansible.builtin.env')`),
which is never written down. Extra vars go in a 0600 file under the run's own private data
directory (`env/extravars-<pid>-<hex>.json`, removed after the run, and swept by the next run
there when a kill -9 left it), never under /tmp or on the command line. The copy of the
environment ansible-runner records in `artifacts/<ident>/command` is cut down to non-secret
ANSIBLE_* settings, and results of `no_log` tasks are censored by the callback.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ansible_runner

from cluster_tool.errors import (
    EXIT_CHECKS_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    ClusterToolError,
    UsageError,
)
from cluster_tool.fileio import PRIVATE_FILE, atomic_write
from cluster_tool.redact import is_secret_name

REPO_ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_CFG = REPO_ROOT / "ansible.cfg"

# Events worth keeping in the result: task outcomes and play boundaries.
_KEPT_EVENTS = frozenset(
    {
        "playbook_on_play_start",
        "playbook_on_task_start",
        "playbook_on_stats",
        "runner_on_ok",
        "runner_on_changed",
        "runner_on_failed",
        "runner_on_unreachable",
        "runner_on_skipped",
        "runner_item_on_failed",
        "runner_on_async_failed",
    }
)

EventHandler = Callable[["PlaybookEvent"], None]

# The per-run extra vars file under `<private_data_dir>/env/`; the pid names its driver.
_EXTRAVARS_FILE = re.compile(r"extravars-(\d+)-[0-9a-f]+\.json")


def default_private_data_dir() -> Path:
    """Where runs keep their artifacts unless told otherwise: `<repo>/runs/ansible`."""
    return REPO_ROOT / "runs" / "ansible"


def fact_cache_dir(inventory: str | Path | Sequence[str | Path]) -> Path:
    """The fact cache every run against this inventory shares (`<repo>/runs/facts/<key>`).

    ansible-runner would otherwise point ansible.cfg's jsonfile cache into each run's own
    artifacts, so every run, a no-change one included, gathered facts again on every host.
    Keyed by inventory: two clusters may both have a gpu001."""
    items = [inventory] if isinstance(inventory, (str, Path)) else list(inventory)
    key = hashlib.sha256("\0".join(sorted(str(Path(i).resolve()) for i in items)).encode())
    return REPO_ROOT / "runs" / "facts" / key.hexdigest()[:12]


def forget_facts(inventory: str | Path | Sequence[str | Path], hosts: Iterable[str]) -> None:
    """Drop the cached facts of `hosts` (a re-imaged node may come back with another OS)."""
    cache = fact_cache_dir(inventory)
    if not cache.is_dir():
        return
    wanted = set(hosts)
    for path in cache.iterdir():
        # ansible-core 2.19 names a host's file `s<schema>_<host>`; older ones `<host>`.
        name = re.sub(r"^s\d+_", "", path.name)
        if name in wanted and path.is_file():
            path.unlink(missing_ok=True)


@dataclass(frozen=True)
class HostStats:
    """One host's line of the play recap."""

    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0


@dataclass(frozen=True)
class PlaybookEvent:
    """The part of one ansible-runner event a caller needs to show progress or explain a failure."""

    event: str
    counter: int
    host: str | None = None
    play: str | None = None
    task: str | None = None
    role: str | None = None
    changed: bool = False
    message: str | None = None

    @property
    def failed(self) -> bool:
        return self.event in {"runner_on_failed", "runner_item_on_failed", "runner_on_async_failed"}

    @property
    def unreachable(self) -> bool:
        return self.event == "runner_on_unreachable"


@dataclass
class PlaybookResult:
    """What a playbook run did, per host, read from `playbook_on_stats` and the task events."""

    playbook: str
    status: str
    rc: int
    hosts: dict[str, HostStats]
    events: list[PlaybookEvent] = field(default_factory=list)
    artifact_dir: Path | None = None
    wall_s: float = 0.0

    @property
    def failed_hosts(self) -> list[str]:
        return sorted(h for h, s in self.hosts.items() if s.failed)

    @property
    def unreachable_hosts(self) -> list[str]:
        return sorted(h for h, s in self.hosts.items() if s.unreachable)

    @property
    def changed_hosts(self) -> list[str]:
        return sorted(h for h, s in self.hosts.items() if s.changed)

    @property
    def changed_total(self) -> int:
        return sum(s.changed for s in self.hosts.values())

    @property
    def succeeded(self) -> bool:
        return self.rc == 0 and not self.failed_hosts and not self.unreachable_hosts

    def exit_code(self) -> int:
        """The CLI contract: 3 when a host was unreachable, 1 on any other failure, else 0."""
        if self.unreachable_hosts:
            return EXIT_UNREACHABLE
        if self.failed_hosts or self.rc != 0:
            return EXIT_CHECKS_FAILED
        return EXIT_OK

    def failures(self) -> list[PlaybookEvent]:
        """The failed and unreachable task events, in the order they happened."""
        return [e for e in self.events if e.failed or e.unreachable]


def _stats_from_event(event_data: Mapping[str, Any]) -> dict[str, HostStats]:
    """Turns the `playbook_on_stats` event into per-host counters."""
    keys = {
        "ok": "ok",
        "changed": "changed",
        "failures": "failed",
        "dark": "unreachable",
        "skipped": "skipped",
        "rescued": "rescued",
        "ignored": "ignored",
    }
    per_host: dict[str, dict[str, int]] = {}
    for source, target in keys.items():
        for host, count in (event_data.get(source) or {}).items():
            per_host.setdefault(host, {})[target] = int(count)
    for host in event_data.get("processed") or {}:
        per_host.setdefault(host, {})
    return {host: HostStats(**counters) for host, counters in sorted(per_host.items())}


def _message(res: Mapping[str, Any]) -> str | None:
    for key in ("msg", "stderr", "reason", "censored"):
        value = res.get(key)
        if value:
            return str(value)
    return None


def _event_summary(raw: Mapping[str, Any]) -> PlaybookEvent:
    data = raw.get("event_data") or {}
    raw_res = data.get("res")
    res: Mapping[str, Any] = raw_res if isinstance(raw_res, Mapping) else {}
    event = str(raw.get("event", ""))
    changed = bool(res.get("changed")) if event.startswith("runner_on_") else False
    message = _message(res) if event not in {"runner_on_ok", "runner_on_skipped"} else None
    return PlaybookEvent(
        event=event,
        counter=int(raw.get("counter", 0)),
        host=data.get("host") or data.get("remote_addr"),
        play=data.get("play"),
        task=data.get("task"),
        role=data.get("role"),
        changed=changed,
        message=message,
    )


def _safe_env(env: Mapping[str, str], keep: Iterable[str]) -> dict[str, str]:
    """The part of an environment worth recording: ANSIBLE_* and named keys, never a secret."""
    wanted = set(keep)
    return {
        k: v
        for k, v in env.items()
        if (k.startswith("ANSIBLE_") or k in wanted) and not is_secret_name(k)
    }


def _scrub_command_artifact(artifact_dir: Path, keep_env: Iterable[str]) -> None:
    """ansible-runner records the whole inherited environment next to the command: cut it down."""
    command_file = artifact_dir / "command"
    if not command_file.is_file():
        return
    try:
        recorded = json.loads(command_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        command_file.unlink(missing_ok=True)
        return
    recorded["env"] = _safe_env(recorded.get("env") or {}, keep_env)
    atomic_write(command_file, json.dumps(recorded), mode=PRIVATE_FILE)


def _owner_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale_extravars(env_dir: Path) -> None:
    """Remove extra vars files a killed driver left (its pid is gone); live runs keep theirs."""
    if not env_dir.is_dir():
        return
    for path in env_dir.iterdir():
        match = _EXTRAVARS_FILE.fullmatch(path.name)
        if match and not _owner_alive(int(match.group(1))):
            path.unlink(missing_ok=True)


def _write_extravars(data_dir: Path, extravars: Mapping[str, Any]) -> Path:
    """Extra vars in a 0600 file under `<data_dir>/env/` (0700), a name no other run shares."""
    env_dir = data_dir / "env"
    env_dir.mkdir(mode=0o700, exist_ok=True)
    env_dir.chmod(0o700)
    _sweep_stale_extravars(env_dir)
    path = env_dir / f"extravars-{os.getpid()}-{secrets.token_hex(4)}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(dict(extravars), handle)
    return path


def run_playbook(
    playbook: str | Path,
    inventory: str | Path | list[str | Path],
    *,
    limit: str | None = None,
    tags: str | Iterable[str] | None = None,
    skip_tags: str | Iterable[str] | None = None,
    extravars: Mapping[str, Any] | None = None,
    envvars: Mapping[str, str] | None = None,
    secret_envvars: Mapping[str, str] | None = None,
    check: bool = False,
    diff: bool = False,
    forks: int | None = None,
    event_handler: EventHandler | None = None,
    private_data_dir: str | Path | None = None,
    fact_cache: str | Path | None = None,
    ident: str | None = None,
    keep_artifacts: int = 20,
    ansible_cfg: str | Path | None = None,
) -> PlaybookResult:
    """Runs `playbook` against `inventory` and returns per-host counters and the task events.

    Secrets (the slurmdbd or BMC password) belong in `secret_envvars`: they reach
    ansible-playbook's environment only, for the roles' `lookup('ansible.builtin.env', ...)`,
    and are written nowhere. `extravars` are handed over in a 0600 file under
    `private_data_dir/env/` that is removed after the run, never on the command line or under
    /tmp. `envvars` are non-secret settings, recorded with the command. Raises UsageError for a
    missing playbook or inventory and ClusterToolError when ansible-runner cannot start the run.
    """
    playbook_path = Path(playbook).resolve()
    if not playbook_path.is_file():
        raise UsageError(f"{playbook}: no such playbook")
    inventories = inventory if isinstance(inventory, list) else [inventory]
    inventory_paths = [str(_inventory_source(Path(i))) for i in inventories]
    for given, resolved in zip(inventories, inventory_paths, strict=True):
        if not Path(resolved).exists():
            raise UsageError(f"{given}: no such inventory")

    data_dir = Path(private_data_dir) if private_data_dir else default_private_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    run_ident = ident or time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}-{playbook_path.stem}"

    cfg = Path(ansible_cfg) if ansible_cfg else ANSIBLE_CFG
    env: dict[str, str] = {"PATH": _search_path()}
    if cfg.is_file():
        env["ANSIBLE_CONFIG"] = str(cfg.resolve())
    env.update(envvars or {})
    recorded_env = set(env) - set(secret_envvars or {})
    env.update(secret_envvars or {})

    collected: list[PlaybookEvent] = []
    stats: dict[str, HostStats] = {}

    def on_event(raw: dict[str, Any]) -> bool:
        name = raw.get("event")
        if name == "playbook_on_stats":
            stats.update(_stats_from_event(raw.get("event_data") or {}))
        if name in _KEPT_EVENTS:
            summary = _event_summary(raw)
            collected.append(summary)
            if event_handler is not None:
                event_handler(summary)
        return True

    def on_status(data: Mapping[str, Any], runner_config: Any = None) -> None:
        # ansible-runner writes its whole environment to `command` just before it starts
        # ansible-playbook: cut it down before the playbook runs, so a kill -9 leaves no secret.
        if data.get("status") == "running":
            _scrub_command_artifact(data_dir / "artifacts" / run_ident, recorded_env)

    cmdline: list[str] = []
    if check:
        cmdline.append("--check")
    if diff:
        cmdline.append("--diff")

    started = time.monotonic()
    runner: Any = None
    vars_file: Path | None = None
    try:
        if extravars:
            vars_file = _write_extravars(data_dir, extravars)
            cmdline += ["-e", f"@{vars_file.resolve()}"]
        try:
            runner = ansible_runner.run(
                private_data_dir=str(data_dir),
                playbook=str(playbook_path),
                inventory=inventory_paths,
                limit=limit,
                tags=_join(tags),
                skip_tags=_join(skip_tags),
                forks=forks,
                cmdline=" ".join(shlex.quote(a) for a in cmdline) or None,
                envvars=env,
                ident=run_ident,
                rotate_artifacts=keep_artifacts,
                # An absolute path: ansible-runner joins it onto the artifacts dir, which keeps it.
                fact_cache=str(Path(fact_cache or fact_cache_dir(inventories)).resolve()),
                suppress_env_files=True,
                quiet=True,
                event_handler=on_event,
                status_handler=on_status,
            )
        finally:
            _scrub_command_artifact(data_dir / "artifacts" / run_ident, recorded_env)
    except (OSError, RuntimeError, ValueError) as exc:
        raise ClusterToolError(f"ansible-runner could not run {playbook}: {exc}") from exc
    finally:
        if vars_file is not None:
            vars_file.unlink(missing_ok=True)

    return PlaybookResult(
        playbook=str(playbook),
        status=str(getattr(runner, "status", "failed")),
        rc=int(getattr(runner, "rc", 1) if runner is not None else 1),
        hosts=stats,
        events=collected,
        artifact_dir=Path(runner.config.artifact_dir) if runner is not None else None,
        wall_s=time.monotonic() - started,
    )


def _inventory_source(path: Path) -> Path:
    """A rendered inventory folder also holds CSVs and Slurm files: use its hosts.yml."""
    resolved = path.resolve()
    if resolved.is_dir() and (resolved / "hosts.yml").is_file():
        return resolved / "hosts.yml"
    return resolved


def _search_path() -> str:
    """PATH with this interpreter's bin first, so the venv's ansible-playbook runs unactivated."""
    here = str(Path(sys.executable).parent)
    rest = os.environ.get("PATH", os.defpath)
    if not (Path(here) / "ansible-playbook").is_file() and shutil.which("ansible-playbook") is None:
        raise ClusterToolError("ansible-playbook not found next to Python or on PATH")
    return here + os.pathsep + rest


def _join(values: str | Iterable[str] | None) -> str | None:
    if values is None:
        return None
    if isinstance(values, str):
        return values or None
    joined = ",".join(values)
    return joined or None
