"""Slurm drain reasons: the one place that writes them and decides whose drain may be lifted.

Every reason the tool writes starts with one of three prefixes, so `sinfo -R` says who drained
a node and why (the check id first):

- `cluster-tool: gpu.ecc GPU3 volatile uncorrectable 2`: node-check (Slurm's
  HealthCheckProgram); it re-proves exactly these checks, so it may lift these and no others.
- `cluster-tool: nccl.fleet: ...` and `cluster-tool: pending validation`: the workflows
  (bring-up, validate-after); the id is followed by a colon.
- `cluster-tool gate: nccl.pair 212 GB/s < 333 GB/s with gpu004` and
  `cluster-tool reimage: ...`: the gate and the re-image ladder.
- `cluster-tool watch: link.flap mlx5_0: ...`: `cluster-tool watch`, in service; the id first,
  so re-image and validate-after see what the watcher found.
- `cluster-tool epilog: link.errors mlx5_0: ...`: Slurm's Epilog (`node-check --epilog`), for
  errors a job's run added (counter deltas, new Xids) that node-check cannot re-prove, so
  node-check never lifts it.

Anything else (`RMA`, `bad PSU`, a reason another tool wrote) is the operator's: only an
operator's explicit word (`validate-after --admit`) lifts it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cluster_tool.findings import Finding

# Slurm keeps a reason on one line; sinfo shows about this much of it.
REASON_MAX = 200


class Owner(StrEnum):
    """Who wrote a drain reason, and so who may lift it."""

    HEALTH = "node-check"
    WORKFLOW = "workflow"
    GATE = "gate"
    REIMAGE = "reimage"
    WATCH = "watch"
    EPILOG = "epilog"


_PREFIX = {
    Owner.HEALTH: "cluster-tool: ",
    Owner.WORKFLOW: "cluster-tool: ",
    Owner.GATE: "cluster-tool gate: ",
    Owner.REIMAGE: "cluster-tool reimage: ",
    Owner.WATCH: "cluster-tool watch: ",
    Owner.EPILOG: "cluster-tool epilog: ",
}
PENDING_REASON = "cluster-tool: pending validation"
REIMAGE_REASON = "cluster-tool reimage: in progress"

_ID = r"[a-z][a-z0-9-]*\.[a-z0-9.-]*[a-z0-9]"
# node-check writes `ID COMPONENT TEXT` (no colon after the id); the workflows `ID: TEXT`.
_HEALTH = re.compile(rf"^cluster-tool: {_ID}(?: |$)")
_WORKFLOW = re.compile(rf"^cluster-tool: (?:{_ID}:(?: |$)|failed$|pending validation$)")
_GATE = re.compile(r"^cluster-tool gate: \S")
_REIMAGE = re.compile(r"^cluster-tool reimage: \S")
_WATCH = re.compile(rf"^cluster-tool watch: ({_ID})(?: |:|$)")
_EPILOG = re.compile(rf"^cluster-tool epilog: {_ID}(?: |:|$)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def one_line(text: str, limit: int = REASON_MAX) -> str:
    """A reason Slurm can hold: control characters (from node or fabric output) and runs of
    whitespace become one space; past `limit`, cut with `...`."""
    text = " ".join(_CONTROL.sub(" ", text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def owner(reason: str) -> Owner | None:
    """Who wrote `reason`; None for a reason the tool did not write (an operator's)."""
    if _HEALTH.match(reason):
        return Owner.HEALTH
    if _WORKFLOW.match(reason):
        return Owner.WORKFLOW
    if _GATE.match(reason):
        return Owner.GATE
    if _REIMAGE.match(reason):
        return Owner.REIMAGE
    if _WATCH.match(reason):
        return Owner.WATCH
    if _EPILOG.match(reason):
        return Owner.EPILOG
    return None


def is_ours(reason: str) -> bool:
    """True for a drain reason any part of cluster-tool wrote."""
    return owner(reason) is not None


def may_lift(reason: str, by: Owner, *, operator_says: bool = False) -> bool:
    """Whether `by` may resume a node Slurm holds drained for `reason`.

    node-check lifts only its own drains (it re-proves only its checks); a workflow that proved
    the node end to end (bring-up's admission) lifts any of the tool's drains; no one lifts an
    operator's drain unless the operator said so for this run (`validate-after --admit`)."""
    if operator_says:
        return True
    who = owner(reason)
    if by is Owner.HEALTH:
        return who is Owner.HEALTH
    return who is not None


# The tool's transient holds: a node waits, nothing was found against it. Any part of the tool
# may write its own finding over them.
TRANSIENT = frozenset({PENDING_REASON, REIMAGE_REASON})


# Who may write a finding over a transient hold: the workflows that set such holds and judge
# the node while it waits (the periodic node-check, the watcher and the epilog leave it).
_JUDGING = frozenset({Owner.WORKFLOW, Owner.GATE, Owner.REIMAGE})


def may_replace(reason: str, by: Owner) -> bool:
    """Whether `by` may write its own drain reason over `reason`: over its own, and (a workflow)
    over the tool's transient holds; never over another's finding (the watcher's Xid, the
    epilog's counters, an operator's RMA), which must stay for the next person to read."""
    if not reason or owner(reason) is by:
        return True
    return reason in TRANSIENT and by in _JUDGING


def workflow_reason(findings: Sequence[Finding], *, by: Owner = Owner.WORKFLOW) -> str:
    """`cluster-tool: ID: message` from the first error finding (the re-image ladder writes
    `cluster-tool reimage: ID: message`)."""
    first = next((f for f in findings if f.fails), None)
    text = f"{first.check}: {first.message}" if first else "failed"
    return one_line(_PREFIX[by] + text)


def step_reason(step: str, why: str) -> str:
    """`cluster-tool reimage: STEP: why`: a re-image step that failed (power, boot, converge)."""
    return one_line(f"{_PREFIX[Owner.REIMAGE]}{step}: {why}")


def gate_reason(
    check: str, what: str, partners: Iterable[str] = (), component: str | None = None
) -> str:
    """`cluster-tool gate: ID[ COMPONENT:] what[ with partners]`: the number against its floor
    and the partners it was measured with."""
    names = sorted(set(partners))
    with_ = f" with {' and '.join(names)}" if names else ""
    where = f" {component}:" if component else ""
    return one_line(f"{_PREFIX[Owner.GATE]}{check}{where} {what}{with_}")


def health_reason(node: str, findings: Sequence[Finding]) -> str | None:
    """`cluster-tool: gpu.ecc GPU3 volatile uncorrectable 2 (+2 more: gpu.xid gpu.dcgm)`, or None
    when no error. Every error's id is in the reason (the first's text is cut to fit), so a later
    node-check knows every check its lift must re-prove (`health_checks`)."""
    errors = [f for f in findings if f.fails]
    if not errors:
        return None
    first = errors[0]
    text = first.message
    for prefix in (f"{node} {first.component}: ", f"{node}: ", f"{node} "):
        if text.startswith(prefix):
            text = text[len(prefix) :]
            break
    parts = [first.check, first.component or "", text]
    others = list(dict.fromkeys(f.check for f in errors[1:] if f.check != first.check))
    more = ""
    if len(errors) > 1:
        more = f" (+{len(errors) - 1} more" + (f": {' '.join(others)})" if others else ")")
    reason = one_line(_PREFIX[Owner.HEALTH] + " ".join(p for p in parts if p))
    if len(reason) + len(more) > REASON_MAX:
        reason = reason[: max(0, REASON_MAX - len(more) - 3)] + "..."
    return reason + more


_MORE = re.compile(rf" \(\+\d+ more(?:: ((?:{_ID})(?: {_ID})*))?\)$")


def health_checks(reason: str) -> list[str] | None:
    """The check ids a node-check drain names: its first id and those of its `(+N more: ...)`
    tail; None when the reason hides some (`(+N more)` without ids: an older node-check's), or
    is not node-check's."""
    if owner(reason) is not Owner.HEALTH:
        return None
    first = reason.removeprefix(_PREFIX[Owner.HEALTH]).split(" ", 1)[0]
    tail = _MORE.search(reason)
    if tail is None:
        return [first]
    if tail.group(1) is None:
        return None
    return list(dict.fromkeys([first, *tail.group(1).split()]))


def watch_reason(check: str, component: str | None, message: str) -> str:
    """`cluster-tool watch: ID[ COMPONENT]: message`: what the watcher found on the node."""
    where = f" {component}" if component else ""
    return one_line(f"{_PREFIX[Owner.WATCH]}{check}{where}: {message}")


def epilog_reason(check: str, component: str | None, message: str) -> str:
    """`cluster-tool epilog: ID[ COMPONENT]: message`: what a job's run added on the node."""
    where = f" {component}" if component else ""
    return one_line(f"{_PREFIX[Owner.EPILOG]}{check}{where}: {message}")


def watch_check(reason: str) -> str | None:
    """The finding id of a drain the watcher wrote; None for anyone else's drain."""
    found = _WATCH.match(reason)
    return found.group(1) if found else None
