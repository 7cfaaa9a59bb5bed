"""The probes' fan-out through pyinfra's API and SSH connector, for benchmarks/fanout.py only.

Issue 15 asked for it as the live path if it came within 1.2x of today's transport; measured
in this machine's localhost runs it did not (1.27x-1.42x paramiko in the tool's own process),
so the tool keeps its transports and does not depend on pyinfra; this module stays so the
comparison can be run again (`pip install pyinfra==3.10.0`).

Each host's probes ride one pyinfra fact, `ProbeScript`: its command is the host's composite
script (cluster_tool/remote/probes.py), its `process()` turns the output back into bytes that
split per probe exactly as the other transports' output does. pyinfra hands a fact its output
as text lines (UTF-8, newline-stripped), so the script's stdout travels base64-encoded.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import re
import shlex
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from paramiko import SSHException
from pyinfra.api import BaseStateCallback, Config, FactBase, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.facts import get_fact
from pyinfra.context import ctx_host, ctx_state

from cluster_tool.errors import ParseError
from cluster_tool.probes import Probe
from cluster_tool.remote.fanout import HostResult, Target, ssh_config_lookup
from cluster_tool.remote.probes import composite_script, split_output

__all__ = ["ProbeScript", "collect_with_pyinfra"]


class ProbeScript(FactBase[tuple[int, bytes]]):
    """One host's probes in one script: (the script's exit status, its stdout)."""

    def command(self, script: str) -> str:
        # The script's exit status rides out past the pipe on fd 5, printed as the last line.
        return (
            "exec 4>&1; rc=$({ { sh -c "
            + shlex.quote(script)
            + "; echo $? >&5; } | base64 >&4; } 5>&1); echo rc=$rc"
        )

    def process(self, output: list[str]) -> tuple[int, bytes]:
        if not output or not output[-1].startswith("rc="):
            raise ParseError("probe script: no exit status")
        try:
            return int(output[-1][3:]), base64.b64decode("".join(output[:-1]), validate=True)
        except (ValueError, binascii.Error) as exc:
            raise ParseError(f"probe script: output not base64: {exc}") from None


class _Errors(BaseStateCallback, logging.Handler):
    """Why a host failed, in pyinfra's words: its connect error, or the last error it logged."""

    def __init__(self) -> None:
        logging.Handler.__init__(self, logging.ERROR)
        self.by_host: dict[str, str] = {}
        self.prefixes: dict[str, str] = {}

    def host_connect_error(self, state: State, host: Any, error: Exception) -> None:
        self.by_host[host.name] = str(error.args[0] if error.args else error)

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        for name, prefix in self.prefixes.items():
            if text.startswith(prefix):
                self.by_host.setdefault(name, _plain(text[len(prefix) :]))


def _since(started: float) -> float:
    return round(time.monotonic() - started, 3)


def _plain(text: str) -> str:
    # pyinfra colours its log lines (click.style): keep the words.
    return re.sub(r"\x1b\[[0-9;]*m", "", text).strip()


def _host_data(
    target: Target,
    lookup: Callable[[str], dict[str, Any]],
    ssh_config: Path | None,
    user: str | None,
) -> dict[str, Any]:
    """pyinfra host data for one target, on the rules ParamikoTransport follows: the config's
    HostName, else the spec's address; host keys checked unless the config says otherwise."""
    opts = lookup(target.name)
    data: dict[str, Any] = {
        "ssh_strict_host_key_checking": str(opts.get("stricthostkeychecking", "yes")).lower(),
    }
    if ssh_config is not None:
        data["ssh_config_file"] = str(ssh_config)
    if "hostname" not in opts and target.address:
        data["ssh_hostname"] = target.address
    if user:
        data["ssh_user"] = user
    return data


def collect_with_pyinfra(
    jobs: Iterable[tuple[Target, Sequence[Probe]]],
    *,
    ssh_config: Path | None = None,
    user: str | None = None,
    concurrency: int = 32,
    timeout: float = 900.0,
    connect_timeout: float = 10.0,
    on_done: Callable[[HostResult], None] | None = None,
) -> dict[str, HostResult]:
    """`fanout.collect` through pyinfra: one SSH connection and one ProbeScript fact per host."""
    import gevent

    jobs = list(jobs)
    if not jobs:
        return {}
    lookup = ssh_config_lookup(ssh_config)
    inventory = Inventory(
        ([(t.name, _host_data(t, lookup, ssh_config, user)) for t, _ in jobs], {})
    )
    state = State(
        inventory,
        Config(PARALLEL=min(concurrency, len(jobs)), CONNECT_TIMEOUT=int(connect_timeout)),
    )
    errors = _Errors()
    errors.prefixes = {h.name: h.print_prefix for h in inventory}
    state.add_callback_handler(errors)
    pyinfra_log = logging.getLogger("pyinfra")
    pyinfra_log.addHandler(errors)
    pyinfra_log.propagate = False  # library code prints nothing: findings carry the errors
    started = time.monotonic()
    results: dict[str, HostResult] = {}

    def finish(result: HostResult) -> None:
        results[result.host] = result
        if on_done is not None:
            on_done(result)

    def probe(target: Target, probes: Sequence[Probe]) -> HostResult:
        names = tuple(p.name for p in probes)
        host = inventory.get_host(target.name)
        begun = time.monotonic()
        script, token = composite_script(probes)
        try:
            with ctx_host.use(host):
                found = get_fact(
                    state, host, ProbeScript, kwargs={"script": script, "_timeout": int(timeout)}
                )
        except (PyinfraError, SSHException, OSError, EOFError) as exc:
            why = f"{type(exc).__name__}: {exc}".rstrip(": ")
            return HostResult(target.name, error=why, probes=names, elapsed_s=_since(begun))
        took = _since(begun)
        if found is None:
            why = errors.by_host.get(target.name, "probe script failed")
            return HostResult(target.name, error=why, probes=names, elapsed_s=took)
        rc, out = found
        try:
            outputs = split_output(out, token)
        except ParseError as exc:
            why = f"probe script failed (exit {rc}): {exc}"
            return HostResult(target.name, error=why, probes=names, elapsed_s=took)
        missing = [n for n in names if n not in outputs]
        if missing:
            why = f"probe script ended early (exit {rc}); no output for {', '.join(missing)}"
            return HostResult(target.name, outputs, error=why, probes=names, elapsed_s=took)
        return HostResult(target.name, outputs, probes=names, elapsed_s=took)

    try:
        with ctx_state.use(state):
            # "No hosts remaining!" when none answered: each says why below.
            with contextlib.suppress(PyinfraError):
                connect_all(state)
            active = set(state.activated_hosts) - set(state.failed_hosts)
            waiting = {}
            for target, probes in jobs:
                if inventory.get_host(target.name) in active:
                    # get_facts runs one fact with the same arguments on every host; each host
                    # has its own script, so one get_fact per host, on pyinfra's pool as it does.
                    waiting[state.pool.spawn(probe, target, probes)] = target
                else:
                    why = errors.by_host.get(target.name, "could not connect")
                    finish(
                        HostResult(
                            target.name,
                            error=why,
                            probes=tuple(p.name for p in probes),
                            elapsed_s=_since(started),
                        )
                    )
            for greenlet in gevent.iwait(list(waiting)):
                finish(greenlet.get())
    finally:
        pyinfra_log.removeHandler(errors)
        for host in inventory:
            client = getattr(host.connector, "client", None)
            if client is not None:
                client.close()
    return {t.name: results[t.name] for t, _ in jobs}
