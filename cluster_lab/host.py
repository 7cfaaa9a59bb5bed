"""The lab's edge to the host: running commands, preconditions, and processes it started.

Every process the lab starts is remembered as (pid, start time) so that `lab down` and
crash cleanup stop exactly those processes and never another one that reused a pid.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cluster_tool.errors import ClusterToolError, UsageError


class LabError(ClusterToolError):
    """Something the lab needed from the host failed (a command, a service that did not come up)."""


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    input: str | None = None,
    timeout: float | None = 120,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a host command; on failure raise LabError with its first stderr line."""
    try:
        proc = subprocess.run(
            list(argv),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=cwd,
            check=False,
        )
    except FileNotFoundError as exc:
        raise UsageError(f"{argv[0]}: not installed (run ./scripts/bootstrap)") from exc
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"{' '.join(argv)}: timed out after {timeout:.0f} s") from exc
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise LabError(
            f"{' '.join(argv)}: exit {proc.returncode}: {detail[-1] if detail else 'no output'}"
        )
    return proc


def require_root() -> None:
    if os.geteuid() != 0:
        raise UsageError("the lab needs root (namespaces, mounts, a bridge); run with sudo")


_TOOLS = ("ip", "unshare", "mount", "debootstrap", "ibsim", "opensm", "ssh", "ssh-keygen")


def require_host_features() -> None:
    """Fail with one line when the kernel or the host lacks what nodes are built from."""
    filesystems = Path("/proc/filesystems").read_text()
    for fs in ("overlay", "tmpfs", "cgroup"):
        if f"\t{fs}\n" not in filesystems:
            raise UsageError(f"the kernel lacks the {fs} filesystem the lab nodes need")
    for ns in ("net", "pid", "uts", "ipc", "mnt", "cgroup"):
        if not Path(f"/proc/self/ns/{ns}").exists():
            raise UsageError(f"the kernel lacks {ns} namespaces the lab nodes need")
    for tool in _TOOLS:
        if shutil.which(tool) is None:
            raise UsageError(f"{tool} is not installed (run ./scripts/bootstrap)")


@dataclass(frozen=True)
class ProcRef:
    """A process the lab started: its pid and kernel start time (guards against pid reuse)."""

    pid: int
    start: int

    @classmethod
    def of(cls, pid: int) -> ProcRef:
        return cls(pid, _start_time(pid) or 0)

    def alive(self) -> bool:
        start = _start_time(self.pid)
        return start is not None and start == self.start and not _is_zombie(self.pid)

    def to_json(self) -> list[int]:
        return [self.pid, self.start]

    @classmethod
    def from_json(cls, data: Sequence[int]) -> ProcRef:
        return cls(int(data[0]), int(data[1]))


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    return text[text.rfind(")") + 2 :].split()


def _start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def _is_zombie(pid: int) -> bool:
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] == "Z"  # type: ignore[index]


def stop_process(ref: ProcRef, *, grace: float = 5.0, sig: int = signal.SIGTERM) -> None:
    """Signal a process the lab started, wait up to `grace` seconds, then kill it."""
    if not ref.alive():
        return
    try:
        os.kill(ref.pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(ref.pid)
        if not ref.alive():
            return
        time.sleep(0.05)
    try:
        os.kill(ref.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    for _ in range(100):
        _reap(ref.pid)
        if not ref.alive():
            return
        time.sleep(0.05)


def _reap(pid: int) -> None:
    # When this very process started the child, collect it so it does not linger as a zombie.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def spawn(
    argv: Sequence[str],
    *,
    log: Path,
    env: dict[str, str] | None = None,
    stdin: int | None = None,
    cwd: Path | None = None,
) -> ProcRef:
    """Start a long-running lab process detached from the caller (own session), logging to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    return ProcRef.of(proc.pid)


def wait_for(predicate: object, timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll `predicate()` until true; raise LabError naming `what` on timeout."""
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise LabError(f"{what}: not ready after {timeout:.0f} s")
        time.sleep(interval)
