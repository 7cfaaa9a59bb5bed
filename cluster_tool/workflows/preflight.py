"""The preflight: what a job needs from outside, checked in seconds before it starts (before a
run record, before Ansible, before a drain): the secrets the run will read, every host it will
touch reachable over SSH the way the run reaches it (in parallel, with a short timeout), Slurm
answering the way the run will ask it, the BMCs a re-image will use taking a connection. Every
missing item in one list; exit 2 when one is the operator's input (a secret, no Slurm client),
else 3 (a host, Slurm or a BMC that does not answer)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ClusterShell.NodeSet import NodeSet

from cluster_tool.errors import (
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    ClusterToolError,
    ParseError,
)
from cluster_tool.remote.fanout import Target, Transport, TransportError
from cluster_tool.slurm import SlurmAdmin, SlurmError, SlurmMissing
from cluster_tool.spec.models import Cluster

# What slurmdbd's role reads (roles/slurm/defaults/main.yml) and the playbook's preflight asks of
# it: at least 12 characters, unless a vault supplies slurm_dbd_storage_pass.
SLURMDBD_PASSWORD = "CLUSTER_TOOL_SLURMDBD_PASSWORD"
SLURMDBD_PASSWORD_MIN = 12
# A host that answers nothing is given this long to start its SSH session; all at once.
CONNECT_TIMEOUT_S = 5.0
SESSION_TIMEOUT_S = 10.0
CONCURRENCY = 64

Kind = Literal["input", "unreachable"]


@dataclass(frozen=True)
class Problem:
    """One thing the run would fail on: the operator's input to fix, or something unreachable."""

    kind: Kind
    text: str


@dataclass
class PreflightResult:
    """Every problem found, what was checked, and how long it took."""

    problems: list[Problem] = field(default_factory=list)
    checked: dict[str, str] = field(default_factory=dict)
    elapsed_s: float = 0.0

    @property
    def exit_code(self) -> int:
        if any(p.kind == "input" for p in self.problems):
            return EXIT_USAGE
        return EXIT_UNREACHABLE if self.problems else EXIT_OK

    def line(self) -> str:
        """The problems as one line (the CLI's error line)."""
        return "preflight: " + "; ".join(p.text for p in self.problems)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": "pass" if not self.problems else "fail",
            "exit_code": self.exit_code,
            "problems": [{"kind": p.kind, "text": p.text} for p in self.problems],
            "checked": self.checked,
            "elapsed_s": self.elapsed_s,
        }


class PreflightFailed(ClusterToolError):
    """The preflight found problems: the job did not start."""

    def __init__(self, result: PreflightResult) -> None:
        self.result = result
        self.exit_code = result.exit_code
        super().__init__(result.line())


def ssh_transport(cluster: Cluster, ssh_config: Path | None) -> Transport:
    """SSH as the run's own collections reach the hosts (its ssh config, the cluster's
    known_hosts), giving up on a host after CONNECT_TIMEOUT_S."""
    from cluster_tool.remote.fanout import OpenSshTransport
    from cluster_tool.remote.known_hosts import KnownHosts

    known = KnownHosts.for_cluster(cluster.name)
    return OpenSshTransport(ssh_config, connect_timeout=CONNECT_TIMEOUT_S, known_hosts=known)


def secret_problems(cluster: Cluster, environ: Mapping[str, str]) -> list[Problem]:
    """The secrets a converge reads that are missing or too short, by name (never their
    values)."""
    problems = []
    dbd = cluster.slurm.accounting_host
    if dbd and "slurm_dbd_storage_pass" not in cluster.ansible_vars:
        value = environ.get(SLURMDBD_PASSWORD, "")
        if len(value) < SLURMDBD_PASSWORD_MIN:
            what = "unset" if not value else f"{len(value)} characters"
            problems.append(
                Problem(
                    "input",
                    f"{SLURMDBD_PASSWORD} is {what}: slurmdbd on {dbd} needs a password of "
                    f"{SLURMDBD_PASSWORD_MIN}+ characters (or slurm_dbd_storage_pass from a "
                    "vault in the spec's ansible_vars)",
                )
            )
    return problems


# What each host is asked in its one session: the OS it runs (any host that lets us in has it).
_OS_RELEASE = "cat /etc/os-release\n"


def ssh_round(
    targets: Sequence[Target], transport: Transport, timeout_s: float = SESSION_TIMEOUT_S
) -> tuple[dict[str, str], dict[str, str]]:
    """One SSH session per target, all at once (the whole round takes one timeout, not one per
    host): host -> why for those that did not answer, host -> their /etc/os-release for those
    that did."""

    def one(target: Target) -> tuple[str, str | None, str]:
        try:
            rc, out, _ = transport.run(target, _OS_RELEASE, timeout_s)
        except TransportError as exc:
            return target.name, str(exc), ""
        if rc != 0:
            return target.name, None, ""  # in, but no os-release: judged below as unreadable
        return target.name, None, out.decode("utf-8", "replace")

    if not targets:
        return {}, {}
    with ThreadPoolExecutor(max_workers=min(CONCURRENCY, len(targets))) as pool:
        answers = list(pool.map(one, targets))
    down = {name: why for name, why, _ in answers if why is not None}
    return down, {name: text for name, why, text in answers if why is None}


def os_problems(cluster: Cluster, releases: Mapping[str, str]) -> list[Problem]:
    """Hosts whose /etc/os-release is not the OS the spec says they run, both named, grouped by
    what they run; a host whose file cannot be read is named too."""
    from cluster_tool.parsers.os_release import parse_os_release

    wanted = {h.name: h.os for h in cluster.hosts() if h.os}
    by_pair: dict[tuple[str, str], list[str]] = {}
    for host, text in releases.items():
        if host not in wanted:
            continue
        try:
            release = parse_os_release(text)
        except ParseError as exc:
            by_pair.setdefault((f"an unreadable /etc/os-release ({exc})", wanted[host]), []).append(
                host
            )
            continue
        if release.spec_name != wanted[host]:
            by_pair.setdefault((release.shown(), wanted[host]), []).append(host)
    return [
        Problem(
            "input",
            f"{NodeSet.fromlist(hosts)} {'runs' if not seen.startswith('an ') else 'has'} "
            f"{seen}; the spec says {expected}",
        )
        for (seen, expected), hosts in by_pair.items()
    ]


def _unreachable_problems(down: Mapping[str, str]) -> list[Problem]:
    by_why: dict[str, list[str]] = {}
    for host, why in down.items():
        by_why.setdefault(why, []).append(host)
    if len(by_why) > 3:  # each its own address or port: the hosts matter, not the words
        return [Problem("unreachable", f"unreachable over SSH: {NodeSet.fromlist(list(down))}")]
    return [
        Problem("unreachable", f"unreachable over SSH: {NodeSet.fromlist(hosts)} ({why})")
        for why, hosts in by_why.items()
    ]


def shared_folder_problems(
    folder: Path, node: Target, transport: Transport, timeout_s: float = SESSION_TIMEOUT_S
) -> list[Problem]:
    """The gate's folder, written here and read back on `node`: the gate's job scripts are
    written on this controller and run on the nodes, which write their outputs back. A folder
    that is not there, or that the node sees without this file, is the site's setup to fix."""
    import secrets
    import shlex

    if not folder.is_dir():
        return [Problem("input", f"the gate's folder {folder} is not a folder on this controller")]
    token = secrets.token_hex(8)
    probe = folder / f".cluster-tool-preflight-{token}"
    try:
        probe.write_text(token + "\n")
    except OSError as exc:
        return [Problem("input", f"the gate's folder {folder}: cannot write here: {exc.strerror}")]
    try:
        rc, out, _ = transport.run(node, f"cat -- {shlex.quote(str(probe))}\n", timeout_s)
    except TransportError as exc:
        return [Problem("unreachable", f"the gate's folder: {node.name} did not answer: {exc}")]
    finally:
        probe.unlink(missing_ok=True)
    if rc != 0 or out.decode("utf-8", "replace").strip() != token:
        return [
            Problem(
                "input",
                f"the gate's folder {folder} is not shared with {node.name}: a file written "
                "here is not there (mount it on the nodes at the same path, or give --workdir)",
            )
        ]
    return []


def bmc_unanswered(urls: Mapping[str, str]) -> dict[str, str]:
    """The BMCs among `urls` (node -> URL) that take no connection (tests hand a fake)."""
    from cluster_tool.bmc.redfish import unanswered

    return unanswered(urls, CONNECT_TIMEOUT_S)


def run_preflight(
    cluster: Cluster,
    hosts: Sequence[str],
    transport: Transport | None,
    *,
    slurm: SlurmAdmin | None = None,
    bmcs: Mapping[str, str] | None = None,
    shared: Path | None = None,
    environ: Mapping[str, str] | None = None,
    secrets: bool = True,
) -> PreflightResult:
    """Check the secrets (a converge's, when `secrets`), SSH to `hosts` (none when `transport`
    is None), the gate's `shared` folder from the first GPU node that answered, Slurm (when
    given) and the BMCs (node -> URL, when given); every problem in one result."""
    started = time.monotonic()
    result = PreflightResult()
    if secrets:
        result.problems += secret_problems(cluster, os.environ if environ is None else environ)
        result.checked["secrets"] = "missing" if result.problems else "ok"
    if transport is not None:
        address = {h.name: h.address for h in cluster.hosts()}
        targets = [Target(h, address.get(h)) for h in hosts]
        down, releases = ssh_round(targets, transport)
        result.problems += _unreachable_problems(down)
        result.problems += os_problems(cluster, releases)
        result.checked["ssh"] = f"{len(targets) - len(down)} of {len(targets)} hosts answered"
        gpu_names = {n.name for n in cluster.gpu_nodes()}
        reader = next((t for t in targets if t.name in gpu_names and t.name not in down), None)
        if shared is not None and reader is not None:
            problems = shared_folder_problems(shared, reader, transport)
            result.problems += problems
            result.checked["gate folder"] = (
                f"{shared} shared with {reader.name}" if not problems else "not shared"
            )
    if slurm is not None:
        gpu = [n.name for n in cluster.gpu_nodes()]
        try:
            known = {s.name for s in slurm.node_states(None)} & set(gpu)
        except SlurmMissing as exc:
            result.problems.append(Problem("input", f"Slurm: {exc}"))
            result.checked["slurm"] = "no client"
        except SlurmError as exc:
            result.problems.append(Problem("unreachable", f"Slurm: {exc}"))
            result.checked["slurm"] = "no answer"
        else:
            result.checked["slurm"] = f"{len(known)} of {len(gpu)} GPU nodes known to Slurm"
    if bmcs:
        down = bmc_unanswered(bmcs)
        if down:
            whys = set(down.values())
            why = f" ({whys.pop()})" if len(whys) == 1 else ""
            result.problems.append(
                Problem("unreachable", f"BMC unreachable: {NodeSet.fromlist(list(down))}{why}")
            )
        result.checked["bmc"] = f"{len(bmcs) - len(down)} of {len(bmcs)} BMCs answered"
    result.elapsed_s = round(time.monotonic() - started, 2)
    return result
