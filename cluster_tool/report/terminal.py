"""What a terminal shows of many nodes, as `clush -b` shows it: a line said by many nodes is
printed once, after their hostlist; a failing run's error findings folded by id the same way,
as many as fit on a screen."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ClusterShell.NodeSet import NodeSet

from cluster_tool.findings import Finding


@dataclass(frozen=True)
class Folded:
    """One line said by `nodes` (a hostlist); `nodes` is "" for a line that names no node."""

    nodes: str
    text: str
    count: int
    names_itself: bool = False  # one node's line that already names its node

    def line(self) -> str:
        return f"{self.nodes}: {self.text}" if self.nodes and not self.names_itself else self.text


def fold(lines: Iterable[tuple[str | None, str]]) -> list[Folded]:
    """(node, text) pairs that say the same folded into one line, their nodes as a hostlist, in
    the order each was first said. Texts that differ only in naming their own node (a leading
    `gpu001: `, or the node in the sentence) or an IPv4 address say the same: a line of one node
    is shown as it was said, a folded one with `(this node)` and `(address)` in their place."""
    said: dict[str, list[tuple[str | None, str]]] = {}
    for node, text in lines:
        said.setdefault(_as_peers_say(text, node), []).append((node, text))
    folded = []
    for key, group in said.items():
        nodes = [n for n, _ in group if n]
        hostlist = str(NodeSet.fromlist(nodes)) if nodes else ""
        if len(group) > 1:
            folded.append(Folded(hostlist, key, len(group)))
            continue
        # One node's line in its own words: `node: ` once, or none where the text names it.
        node, text = group[0]
        if node and text.startswith(f"{node}: "):
            folded.append(Folded(hostlist, text[len(node) + 2 :], 1))
        else:
            named = _node_word(node).search(text) is not None
            folded.append(Folded(hostlist, text, 1, names_itself=named))
    return folded


_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])")


def _without_prefix(text: str, node: str | None) -> str:
    """`text` less the node's name that starts it (`gpu001: ...`, `gpu001 mlx5_3: ...`)."""
    for lead in (f"{node}: ", f"{node} "):
        if node and text.startswith(lead):
            return text[len(lead) :]
    return text


def _as_peers_say(text: str, node: str | None) -> str:
    """`text` as the node's peers would say it: the leading `node: ` dropped, the node named
    elsewhere written `(this node)`, IPv4 addresses `(address)`."""
    text = _IPV4.sub("(address)", _without_prefix(text, node))
    return _node_word(node).sub("(this node)", text) if node else text


def _node_word(node: str | None) -> re.Pattern[str]:
    """The node's name as a word of a line (`gpu001` in `gpu001 mlx5_3`, not in `gpu0010`)."""
    if not node:
        return re.compile(r"(?!)")  # matches nothing
    return re.compile(rf"(?<![\w.-]){re.escape(node)}(?![\w.-])")


@dataclass(frozen=True)
class Digest:
    """The lines to show, and how many error findings (and folded lines) did not fit."""

    lines: list[str]
    shown: int
    left_out: int


@dataclass(frozen=True)
class FindingGroup:
    """Findings of one id and severity that say the same, their nodes as one hostlist."""

    severity: str
    check: str
    folded: Folded


def finding_groups(findings: Iterable[Finding]) -> list[FindingGroup]:
    """Findings grouped by severity and id (in the order each was first found), each group's
    lines folded as `fold` folds them."""
    by_id: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        by_id.setdefault((f.severity, f.check), []).append(f)
    return [
        FindingGroup(severity, check, folded)
        for (severity, check), fs in by_id.items()
        for folded in fold((f.node, f.message) for f in fs)
    ]


def error_digest(findings: Sequence[Finding], max_lines: int) -> Digest:
    """The run's error findings grouped by id (the id first found first), each id's folded as
    `fold` folds lines: `check  hostlist: message`, at most `max_lines` lines (the last one
    then saying how many findings more there are)."""
    errors = [f for f in findings if f.severity == "error"]
    groups = finding_groups(errors)
    width = max((len(g.check) for g in groups), default=0)
    rows = [f"{g.check:<{width}}  {g.folded.line()}" for g in groups]
    if len(rows) <= max_lines:
        return Digest(rows, len(errors), 0)
    kept = rows[: max(max_lines - 1, 0)]
    shown = sum(g.folded.count for g in groups[: len(kept)])
    return Digest(kept, shown, len(errors) - shown)


def none_found(found: int, expected: int, where: str) -> str | None:
    """The one-line diagnosis of an input that names none of the spec's nodes (a capture or a
    fabric from another cluster, or a naming pattern that is not the site's); None otherwise."""
    if found or not expected:
        return None
    return f"0 of {expected} spec nodes found in {where}: wrong file or naming pattern?"
