"""The cluster's own known_hosts: every node's SSH host key, recorded at first contact and checked
at every later one, so that the munge key and the slurmdbd password are never pushed to a host
that answers with another key. Re-imaging forgets exactly the re-imaged node's key.

One file per cluster beside its context (`<context dir>/<cluster>.known_hosts`, 0600). OpenSSH
reads it through `UserKnownHostsFile`; `StrictHostKeyChecking=accept-new` records a new host's
key and refuses a changed one (ssh_config(5)); `ssh-keygen -R HOST -f FILE` forgets one host
(ssh-keygen(1))."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from cluster_tool.context import context_dir
from cluster_tool.errors import ClusterToolError

# What OpenSSH prints when a host's key is not the recorded one (sshconnect.c).
_CHANGED = ("REMOTE HOST IDENTIFICATION HAS CHANGED", "Host key verification failed")


class HostKeyChanged(ClusterToolError):
    """A host answered with another key than the one the cluster recorded for it."""


@dataclass(frozen=True)
class KnownHosts:
    """One cluster's known_hosts file."""

    path: Path

    @classmethod
    def for_cluster(cls, cluster: str) -> KnownHosts:
        return cls(context_dir() / f"{cluster}.known_hosts")

    def ssh_options(self) -> list[str]:
        """OpenSSH options that record a new host's key here and refuse a changed one."""
        return ["-o", "StrictHostKeyChecking=accept-new", "-o", f"UserKnownHostsFile={self.path}"]

    def ensure(self) -> Path:
        """The file, created empty (0600, its folder 0700) when missing."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.close(fd)
        self.path.chmod(0o600)
        return self.path

    def forget(self, names: Iterable[str]) -> None:
        """Forget every key recorded for these host names and addresses (a re-imaged node comes
        back with new keys); every other host's key stays."""
        self.ensure()
        for name in dict.fromkeys(n for n in names if n):
            subprocess.run(
                ["ssh-keygen", "-R", name, "-f", str(self.path)],
                capture_output=True,
                check=False,
            )
        # ssh-keygen keeps the file as it was in FILE.old: the forgotten keys stay forgotten.
        Path(f"{self.path}.old").unlink(missing_ok=True)
        self.path.chmod(0o600)

    def first_contact(
        self,
        targets: Mapping[str, str],
        ssh_config: Path | None = None,
        *,
        timeout: float = 30.0,
        workers: int = 32,
    ) -> dict[str, str]:
        """Contact each host (name -> the address Ansible dials): a new host's key is recorded,
        a known one checked. Returns name -> OpenSSH's complaint for each host whose key
        changed; a host that cannot be reached is left for the caller's own connection."""
        self.ensure()

        def contact(address: str) -> str | None:
            argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(timeout)}"]
            # A multiplexed session skips the key exchange, and with it the check.
            argv += [*self.ssh_options(), "-o", "ControlPath=none"]
            if ssh_config is not None:
                argv += ["-F", str(ssh_config)]
            argv += [address, "true"]
            try:
                proc = subprocess.run(
                    argv, capture_output=True, text=True, timeout=timeout + 5, check=False
                )
            except subprocess.TimeoutExpired:
                return None
            if proc.returncode == 255 and any(mark in proc.stderr for mark in _CHANGED):
                lines = [line for line in proc.stderr.splitlines() if line.strip(" @")]
                return lines[-1].strip() if lines else "host key verification failed"
            return None

        names = list(targets)
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(names) or 1))) as pool:
            answers = list(pool.map(lambda n: contact(targets[n]), names))
        return {n: why for n, why in zip(names, answers, strict=True) if why is not None}

    def check(self, targets: Mapping[str, str], ssh_config: Path | None = None) -> None:
        """First contact with every target; raises HostKeyChanged naming each changed host."""
        refused = self.first_contact(targets, ssh_config)
        if refused:
            names = ", ".join(sorted(refused))
            raise HostKeyChanged(
                f"host key changed on {names} ({self.path}): not pushing secrets to it; a "
                f"re-imaged node is forgotten by `re-image`, otherwise "
                f"`ssh-keygen -R ADDRESS -f {self.path}` once the new key is verified"
            )
