"""The read-only SSH fan-out: one session per host, every probe of that host in it, many hosts
at once; captures saved to a folder and replayed from it offline.

Capture layout (`--save DIR`, read back by `--from DIR`; run records embed it as is):

    DIR/manifest.json           {"version": 1, "created": ISO time, "hosts": {HOST: {
                                   "probes": [NAME, ...], "reachable": bool, "error": str|null,
                                   "elapsed_s": float}}}
    DIR/HOST/NAME.out           the probe's stdout, byte for byte
    DIR/HOST/probes.json        {NAME: {"rc": int, "stderr": str}}

A host that could not be reached has no folder, only its manifest entry with the error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from cluster_tool.bounds import host_name
from cluster_tool.errors import ParseError, UsageError
from cluster_tool.fileio import (
    PRIVATE_FILE,
    atomic_write,
    load_json,
    private_dir,
    read_input_bytes,
)
from cluster_tool.probes import Probe, ProbeOutput
from cluster_tool.remote.known_hosts import KnownHosts
from cluster_tool.remote.probes import composite_script, outputs_to_json, split_output

__all__ = [
    "CAPTURE_VERSION",
    "HostResult",
    "LocalTransport",
    "OpenSshTransport",
    "ParamikoTransport",
    "Target",
    "Transport",
    "collect",
    "load_capture",
    "save_capture",
]

CAPTURE_VERSION = 1


@dataclass(frozen=True)
class Target:
    """A host to reach: its name (what findings say) and the address to dial, if known."""

    name: str
    address: str | None = None


@dataclass
class HostResult:
    """What came back from one host: its probes' output, or why it could not be reached."""

    host: str
    outputs: dict[str, ProbeOutput] = field(default_factory=dict)
    error: str | None = None
    elapsed_s: float = 0.0
    probes: tuple[str, ...] = ()

    @property
    def reachable(self) -> bool:
        return self.error is None


class TransportError(Exception):
    """The host could not be reached or the session broke; the message says how."""


class Transport(Protocol):
    """Runs a shell script on a host with stdin = the script; returns (rc, stdout, stderr)."""

    def run(self, target: Target, script: str, timeout: float) -> tuple[int, bytes, bytes]: ...


def ssh_config_lookup(path: Path | None) -> Callable[[str], dict[str, Any]]:
    """Host name -> its options in `path`, else in ~/.ssh/config when there is one."""
    import paramiko

    default = Path.home() / ".ssh" / "config"
    path = path or (default if default.is_file() else None)
    config = paramiko.SSHConfig()
    if path is not None and path.is_file():
        config = paramiko.SSHConfig.from_path(str(path))
    return config.lookup


@dataclass
class ParamikoTransport:
    """SSH through paramiko, reading Host blocks of an OpenSSH config (HostName, User, Port,
    IdentityFile, StrictHostKeyChecking). The spec's address is dialled when the config
    does not name the host."""

    ssh_config: Path | None = None
    user: str | None = None
    connect_timeout: float = 10.0
    # The cluster's known_hosts (keys recorded at the converge's first contact): when it exists
    # it is read in place of the operator's, as OpenSSH's UserKnownHostsFile would be.
    known_hosts: KnownHosts | None = None

    def __post_init__(self) -> None:
        # paramiko logs a traceback per failed handshake; the finding says it in one line.
        logging.getLogger("paramiko").addHandler(logging.NullHandler())
        self._lookup = ssh_config_lookup(self.ssh_config)

    def run(self, target: Target, script: str, timeout: float) -> tuple[int, bytes, bytes]:
        import paramiko

        opts = self._lookup(target.name)
        hostname = str(opts.get("hostname", target.name))
        if hostname == target.name and target.address:
            hostname = target.address
        user = self.user or opts.get("user") or os.environ.get("USER") or "root"
        raw_keys = opts.get("identityfile") or []
        keys = [os.path.expanduser(str(k)) for k in raw_keys] if isinstance(raw_keys, list) else []
        client = paramiko.SSHClient()
        if self.known_hosts is not None and self.known_hosts.path.is_file():
            client.load_host_keys(str(self.known_hosts.path))
        else:
            client.load_system_host_keys()
        strict = str(opts.get("stricthostkeychecking", "yes")).lower()
        known = opts.get("userknownhostsfile")
        if strict == "no":
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        else:
            if isinstance(known, str) and os.path.isfile(os.path.expanduser(known)):
                client.load_host_keys(os.path.expanduser(known))
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            for attempt in (1, 2):
                try:
                    client.connect(
                        hostname,
                        port=int(str(opts.get("port", 22))),
                        username=str(user),
                        key_filename=keys or None,  # type: ignore[arg-type]  # takes a list
                        timeout=self.connect_timeout,
                        banner_timeout=self.connect_timeout,
                        auth_timeout=self.connect_timeout,
                        look_for_keys=not keys,
                        allow_agent=not keys,
                    )
                    break
                except paramiko.SSHException:
                    # sshd's MaxStartups drops handshakes beyond its limit: try once more.
                    if attempt == 2:
                        raise
                    time.sleep(0.5)
            stdin, stdout, stderr = client.exec_command("sh -s", timeout=timeout)
            stdin.write(script)
            stdin.channel.shutdown_write()
            out = stdout.read()
            err = stderr.read()
            rc = stdout.channel.recv_exit_status()
            return rc, out, err
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}".rstrip(": ")) from exc
        finally:
            client.close()


@dataclass
class OpenSshTransport:
    """SSH through the OpenSSH client (honours everything in ssh_config, ControlMaster too)."""

    ssh_config: Path | None = None
    connect_timeout: float = 10.0
    # The cluster's known_hosts: a new host's key is recorded there, a changed one refused.
    known_hosts: KnownHosts | None = None

    def run(self, target: Target, script: str, timeout: float) -> tuple[int, bytes, bytes]:
        argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(self.connect_timeout)}"]
        if self.known_hosts is not None:
            argv += self.known_hosts.ssh_options()
        if self.ssh_config is not None:
            argv += ["-F", str(self.ssh_config)]
            host = target.name
        else:
            host = target.address or target.name
        argv += [host, "sh -s"]
        try:
            proc = subprocess.run(
                argv, input=script.encode(), capture_output=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise TransportError(f"no answer in {timeout:g} s") from exc
        if proc.returncode == 255:  # ssh's own failure, not the script's
            last = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            raise TransportError(last[-1] if last else "ssh failed (exit 255)")
        return proc.returncode, proc.stdout, proc.stderr


def transport_named(
    name: str, ssh_config: Path | None, known_hosts: KnownHosts | None = None
) -> Transport:
    """The transport an operator names with `--transport`, over `--ssh-config` and the
    cluster's known_hosts (UsageError for a config that is not there or a name that is not a
    transport)."""
    if ssh_config is not None and not ssh_config.is_file():
        raise UsageError(f"--ssh-config {ssh_config}: no such file")
    if name == "paramiko":
        return ParamikoTransport(ssh_config, known_hosts=known_hosts)
    if name == "openssh":
        return OpenSshTransport(ssh_config, known_hosts=known_hosts)
    raise UsageError("--transport: paramiko or openssh")


@dataclass
class LocalTransport:
    """This machine itself (node-check runs the same probes without SSH)."""

    def run(self, target: Target, script: str, timeout: float) -> tuple[int, bytes, bytes]:
        try:
            proc = subprocess.run(
                ["sh", "-s"],
                input=script.encode(),
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise TransportError(f"probes did not finish in {timeout:g} s") from exc
        return proc.returncode, proc.stdout, proc.stderr


def _one(
    transport: Transport, target: Target, probes: Sequence[Probe], timeout: float
) -> HostResult:
    script, token = composite_script(probes)
    started = time.monotonic()
    names = tuple(p.name for p in probes)
    try:
        rc, out, err = transport.run(target, script, timeout)
    except TransportError as exc:
        return HostResult(target.name, error=str(exc), probes=names, elapsed_s=_since(started))
    try:
        outputs = split_output(out, token)
    except ParseError as exc:
        detail = err.decode("utf-8", "replace").strip().splitlines()
        why = detail[-1] if detail else str(exc)
        return HostResult(
            target.name,
            error=f"probe script failed (exit {rc}): {why}",
            probes=names,
            elapsed_s=_since(started),
        )
    missing = [n for n in names if n not in outputs]
    if missing:
        return HostResult(
            target.name,
            outputs=outputs,
            error=f"probe script ended early (exit {rc}); no output for {', '.join(missing)}",
            probes=names,
            elapsed_s=_since(started),
        )
    return HostResult(target.name, outputs=outputs, probes=names, elapsed_s=_since(started))


def _since(started: float) -> float:
    return round(time.monotonic() - started, 3)


def collect(
    jobs: Iterable[tuple[Target, Sequence[Probe]]],
    transport: Transport,
    *,
    concurrency: int = 32,
    timeout: float = 900.0,
    on_done: Callable[[HostResult], None] | None = None,
) -> dict[str, HostResult]:
    """Run each host's probes in one session per host, `concurrency` hosts at a time."""
    jobs = list(jobs)
    if concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    results: dict[str, HostResult] = {}
    if not jobs:
        return results
    with ThreadPoolExecutor(max_workers=min(concurrency, len(jobs))) as pool:
        futures = [pool.submit(_one, transport, t, p, timeout) for t, p in jobs]
        for future in futures:
            result = future.result()
            results[result.host] = result
            if on_done is not None:
                on_done(result)
    return results


def save_capture(directory: Path, results: Mapping[str, HostResult]) -> None:
    """Write every host's raw outputs in the capture layout (see the module docstring)."""
    private_dir(directory)
    manifest_path = directory / "manifest.json"
    manifest: dict[str, object] = {"version": CAPTURE_VERSION, "hosts": {}}
    if manifest_path.is_file():  # a second collection into the same folder adds to it
        with contextlib.suppress(UsageError):
            manifest = _capture_json(manifest_path)
    manifest["created"] = datetime.now(UTC).isoformat(timespec="seconds")
    hosts = manifest.setdefault("hosts", {})
    assert isinstance(hosts, dict)
    for name, result in results.items():
        if "/" in name or name.startswith("."):
            raise UsageError(f"host name {name!r} cannot name a capture folder")
        entry = hosts.setdefault(name, {"probes": []})
        entry["probes"] = sorted(set(entry.get("probes", [])) | set(result.outputs))
        entry.update(
            {"reachable": result.reachable, "error": result.error, "elapsed_s": result.elapsed_s}
        )
        if not result.outputs:
            continue
        folder = private_dir(directory / name)
        meta_path = folder / "probes.json"
        meta = _capture_json(meta_path) if meta_path.is_file() else {}
        for probe, out in result.outputs.items():
            atomic_write(folder / f"{probe}.out", out.stdout, mode=PRIVATE_FILE)
        meta.update(outputs_to_json(result.outputs))
        atomic_write(meta_path, json.dumps(meta, indent=2, sort_keys=True) + "\n")
    atomic_write(manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def _capture_json(path: Path) -> dict:
    """A JSON object of a capture; a capture from elsewhere that is not one is a UsageError."""
    data = load_json(_capture_bytes(path), f"{path}: not a capture file")
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a capture file: expected a JSON object")
    return data


def _no_link(path: Path, *, want_dir: bool = False) -> None:
    """UsageError when a capture's entry is a symlink or (a host's folder) not a folder: a
    capture from elsewhere is read as it is, never through a link to a file of this machine."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise UsageError(f"{path}: is a symlink; a capture's files are never read through one")
    if want_dir and not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{path}: not a folder")


def _capture_bytes(path: Path) -> bytes:
    """A capture's file: a regular file only (not a symlink, FIFO or device), bounded."""
    _no_link(path)
    return read_input_bytes(path, follow_symlinks=False)


def _capture_name(name: object, path: Path) -> str:
    # A name from a capture made elsewhere becomes a path: it must stay inside the capture.
    text = str(name)
    if not text or "/" in text or "\x00" in text or text.startswith("."):
        raise UsageError(f"{path}: {text!r} cannot name a file of the capture")
    return text


def _is_entry(entry: object) -> bool:
    """A manifest entry as `save_capture` writes it (a capture from elsewhere may hold anything)."""
    if not isinstance(entry, dict):
        return False
    probes, elapsed = entry.get("probes", []), entry.get("elapsed_s", 0.0)
    return (
        isinstance(probes, list)
        and all(isinstance(p, str) for p in probes)
        and isinstance(elapsed, int | float)
        and not isinstance(elapsed, bool)
        and isinstance(entry.get("error"), str | None)
        and isinstance(entry.get("reachable", True), bool)
    )


def load_capture(directory: Path, hosts: Iterable[str] | None = None) -> dict[str, HostResult]:
    """Read a saved capture back as if it had just been collected."""
    manifest_path = directory / "manifest.json"
    if not os.path.lexists(manifest_path):
        raise UsageError(f"{directory}: not a capture folder (no manifest.json)")
    manifest = _capture_json(manifest_path)
    if manifest.get("version") != CAPTURE_VERSION or not isinstance(manifest.get("hosts"), dict):
        raise UsageError(f"{manifest_path}: expected capture version {CAPTURE_VERSION}")
    wanted = set(hosts) if hosts is not None else None
    results: dict[str, HostResult] = {}
    for name, entry in manifest["hosts"].items():
        if wanted is not None and name not in wanted:
            continue
        if not _is_entry(entry):
            raise UsageError(f"{manifest_path}: host {name!r}: not a capture entry")
        # A host's name becomes a path, and is a host name (never a range a report expands).
        folder = directory / _capture_name(name, manifest_path)
        host_name(name, f"{manifest_path}: host")
        _no_link(folder, want_dir=True)
        meta_path = folder / "probes.json"
        meta = _capture_json(meta_path) if os.path.lexists(meta_path) else {}
        outputs = {}
        for probe in entry.get("probes", []):
            out_path = folder / f"{_capture_name(probe, manifest_path)}.out"
            if not os.path.lexists(out_path):
                continue
            info = meta.get(probe, {})
            if not isinstance(info, dict):
                raise UsageError(f"{meta_path}: {probe!r}: not a capture entry")
            try:
                rc = int(info.get("rc", 0))
            except (TypeError, ValueError):
                raise UsageError(f"{meta_path}: {probe!r}: rc is not a number") from None
            # Node output is kept as it came: bytes that are not UTF-8 are shown replaced.
            text = _capture_bytes(out_path).decode("utf-8", errors="replace")
            outputs[probe] = ProbeOutput(rc, text, str(info.get("stderr", "")))
        results[name] = HostResult(
            name,
            outputs=outputs,
            error=entry.get("error") if not entry.get("reachable", True) else None,
            elapsed_s=float(entry.get("elapsed_s", 0.0)),
            probes=tuple(entry.get("probes", [])),
        )
    return results
