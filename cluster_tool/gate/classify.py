"""Reads a job's raw output for what the numbers do not say: NCCL errors by kind, and GDR use.

Error lines are matched on the words NCCL, CUDA, Open MPI/PMIx and srun actually print;
NCCL's `host:pid:tid [dev]` prefix (and srun's `error: host:`) names the node.
With NCCL_DEBUG=INFO every network channel says its transport: `via NET/IB/0/GDRDMA`
moves data GPU to HCA directly; plain `via NET/IB/0` bounces through host memory, which
on an H100 fabric means nvidia_peermem (or dma-buf) is not working on that host.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from cluster_tool.findings import Finding

# Order matters: the first pattern that matches a line names its kind (OOM before the
# generic CUDA failure it is wrapped in, IB before the transport that reports it).
_KINDS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    (
        "nccl.oom",
        "out of memory",
        re.compile(
            r"out of memory|cudaErrorMemoryAllocation|Failed to CUDA (?:c|m)alloc|"
            r"Cuda failure 2\b|OUT_OF_MEMORY",
            re.I,
        ),
    ),
    (
        "nccl.ib",
        "InfiniBand error",
        re.compile(
            r"NET/IB\s*:.*(?:error|failed|Got completion)|ibv_\w+ (?:error|failed)|"
            r"IBV_WC_\w+|ibv_poll_cq|Got completion (?:with|from peer)|mlx5: .*error",
            re.I,
        ),
    ),
    (
        "nccl.transport",
        "network transport error",
        re.compile(
            r"NET/Socket\s*:.*(?:error|fail)|Connection (?:refused|reset|closed)|"
            r"remote process exited or there was a network error|"
            r"unhandled system error|ncclSystemError|ncclRemoteError|socketPollConnect|"
            r"Call to (?:connect|recv|send) (?:returned|failed)|Net : Connection closed|"
            r"Error encountered progressing operation",
            re.I,
        ),
    ),
    (
        "nccl.cuda",
        "CUDA error",
        re.compile(
            r"Cuda failure|CUDA error|cudaError\w+|CUDA_ERROR_\w+|"
            r"unhandled cuda error|Xid \d+",
            re.I,
        ),
    ),
    (
        "nccl.abort",
        "timeout or abort",
        re.compile(
            r"Watchdog caught collective operation timeout|NCCL timeout|"
            r"DUE TO TIME LIMIT|Aborted \(core dumped\)|ncclInternalError|"
            r"NCCL communicator was aborted|Test NCCL failure|Test CUDA failure",
            re.I,
        ),
    ),
    (
        "nccl.launch",
        "PMIx/MPI launch error",
        re.compile(
            r"PMIX ERROR|PMIx_\w+ failed|pmix.*(?:error|fail)|OPAL ERROR|MPI_ABORT|"
            r"srun: error:|Task launch for StepId|couldn't (?:open|execute)|"
            r"error while loading shared libraries|command not found",
            re.I,
        ),
    ),
)

# NCCL's line prefix: `gpu003:12345:12400 [3] NCCL WARN ...`.
_PREFIX = re.compile(r"^\s*(?P<host>[A-Za-z0-9][\w.-]*):\d+:\d+\s+\[\d+\]")
_SRUN_HOST = re.compile(r"srun: error: (?P<host>[A-Za-z0-9][\w.-]*): task")
# nccl-tests' own failure lines: `gpu001: Test NCCL failure common.cu:1005 '...'`.
_TEST_HOST = re.compile(r"^\s*(?:\.\.\s+)?(?P<host>[A-Za-z0-9][\w.-]*)(?: pid \d+)?: Test ")
# Consequences, not causes: a task that exited after an NCCL error, or a step we cancelled.
_AFTERMATH = re.compile(
    r"srun: error: .*(?:Exited with exit code|Killed|Terminated)|srun: Job step aborted|"
    r"CANCELLED AT .* DUE TO (?!TIME LIMIT)",
    re.I,
)
_CHANNEL = re.compile(r"via NET/(?P<net>IB|Socket)/(?P<dev>\d+)(?P<gdr>/GDRDMA)?")


@dataclass(frozen=True)
class ErrorLine:
    """One classified error line: its kind (a finding id), the host it names, the text."""

    check: str
    kind: str
    host: str | None
    line_no: int
    text: str


def _host_of(line: str) -> str | None:
    m = _PREFIX.match(line) or _SRUN_HOST.search(line) or _TEST_HOST.match(line)
    return m.group("host") if m else None


def classify_errors(text: str) -> list[ErrorLine]:
    """Every error line of a job's output with its kind; informational NCCL lines are skipped."""
    found: list[ErrorLine] = []
    for no, line in enumerate(text.splitlines(), 1):
        if " NCCL INFO " in line or _AFTERMATH.search(line):
            continue
        for check, kind, pattern in _KINDS:
            if pattern.search(line):
                found.append(ErrorLine(check, kind, _host_of(line), no, line.strip()))
                break
    return found


@dataclass(frozen=True)
class GdrUse:
    """NET/IB channels of one host, and how many of them use GPUDirect RDMA."""

    host: str
    ib_channels: int
    gdr_channels: int
    socket_channels: int

    @property
    def gdr_missing(self) -> bool:
        return self.socket_channels > 0 or self.gdr_channels < self.ib_channels


def gdr_use(text: str) -> dict[str, GdrUse]:
    """Per host, the network channels NCCL built and whether each goes GPU-direct."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for line in text.splitlines():
        if "NCCL INFO" not in line or " via NET/" not in line:
            continue
        host = _host_of(line)
        m = _CHANNEL.search(line)
        if host is None or m is None:
            continue
        c = counts[host]
        if m.group("net") == "Socket":
            c[2] += 1
        else:
            c[0] += 1
            c[1] += 1 if m.group("gdr") else 0
    return {h: GdrUse(h, ib, gdr, sock) for h, (ib, gdr, sock) in sorted(counts.items())}


def error_findings(errors: list[ErrorLine], job_nodes: tuple[str, ...]) -> list[Finding]:
    """One finding per kind and host (the first line as evidence), not one per repeated line.

    In a one-node job the host is the culprit (error). Across nodes the host is only where
    the error was seen (the peer of a bad HCA reports the completion error too), so these
    are info: localisation decides whom to blame.
    """
    severity: Literal["error", "info"] = "error" if len(job_nodes) == 1 else "info"
    seen: dict[tuple[str, str | None], tuple[ErrorLine, int]] = {}
    for e in errors:
        host = e.host if e.host in job_nodes else None
        key = (e.check, host)
        first, n = seen.get(key, (e, 0))
        seen[key] = (first, n + 1)
    findings = []
    for (check, host), (first, n) in seen.items():
        where = host or ",".join(job_nodes)
        more = f" ({n} lines)" if n > 1 else ""
        findings.append(
            Finding(
                check=check,
                severity=severity,
                node=host,
                component=None,
                expected="no errors",
                observed=first.text[:300],
                message=f"{first.kind} in the job on {where}{more}: {first.text[:200]}",
            )
        )
    return findings


def gdr_findings(jobs: Sequence[tuple[tuple[str, ...], dict[str, GdrUse]]]) -> list[Finding]:
    """`gdr.not-used` for the hosts that bypass GPUDirect RDMA, judged over every job.

    A host is suspect when a job it ran in had NET/IB channels without GDRDMA and no job it
    ran in was GDR throughout (so the healthy partner of a bad host is cleared by its other
    jobs). Among suspects, those whose own log lines show the plain channels are named
    first; where no line names its host, the suspects are named as they are.
    """
    clean: set[str] = set()
    dirty: set[str] = set()
    own: dict[str, GdrUse] = {}
    for nodes, use in jobs:
        if len(nodes) < 2 or not use:
            continue  # one node, or no channel lines (NCCL_DEBUG not INFO): no evidence
        if any(u.gdr_missing for u in use.values()):
            dirty.update(nodes)
            own.update({h: u for h, u in use.items() if u.gdr_missing and h in nodes})
        else:
            clean.update(nodes)
    suspects = dirty - clean
    named = sorted({h for h in suspects if h in own} or suspects)
    findings = []
    for host in named:
        u = own.get(host)
        if u is not None:
            plain = u.ib_channels - u.gdr_channels
            observed = f"{plain} of {u.ib_channels} NET/IB channels without GDRDMA"
            if u.socket_channels:
                observed += f", {u.socket_channels} over sockets"
        else:
            observed = "every job it ran in had NET/IB channels without GDRDMA"
        findings.append(
            Finding(
                check="gdr.not-used",
                severity="error",
                node=host,
                component="nvidia_peermem",
                expected="every NET/IB channel via GDRDMA",
                observed=observed,
                message=(
                    f"{host}: NCCL moves inter-node data through host memory ({observed}); "
                    "check nvidia_peermem (lsmod) or dma-buf support"
                ),
            )
        )
    return findings
