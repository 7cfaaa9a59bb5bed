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

    def line(self) -> str:
        return f"{self.nodes}: {self.text}" if self.nodes else self.text


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
        if len(group) == 1:
            node, text = group[0]
            shown = _without_prefix(text, node)
        else:
            shown = key
        folded.append(Folded(str(NodeSet.fromlist(nodes)) if nodes else "", shown, len(group)))
    return folded


_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])")


def _without_prefix(text: str, node: str | None) -> str:
    return text[len(node) + 2 :] if node and text.startswith(f"{node}: ") else text


def _as_peers_say(text: str, node: str | None) -> str:
    """`text` as the node's peers would say it: the leading `node: ` dropped, the node named
    elsewhere written `(this node)`, IPv4 addresses `(address)`."""
    text = _IPV4.sub("(address)", _without_prefix(text, node))
    if node:
        text = re.sub(rf"(?<![\w.-]){re.escape(node)}(?![\w.-])", "(this node)", text)
    return text


@dataclass(frozen=True)
class Digest:
    """The lines to show, and how many error findings (and folded lines) did not fit."""

    lines: list[str]
    shown: int
    left_out: int


def error_digest(findings: Sequence[Finding], max_lines: int) -> Digest:
    """The run's error findings grouped by id (the id first found first), each id's folded as
    `fold` folds lines: `check  hostlist: message`, at most `max_lines` lines (the last one
    then saying how many findings more there are)."""
    errors = [f for f in findings if f.severity == "error"]
    by_check: dict[str, list[Finding]] = {}
    for f in errors:
        by_check.setdefault(f.check, []).append(f)
    folded = [
        (check, group)
        for check, fs in by_check.items()
        for group in fold((f.node, f.message) for f in fs)
    ]
    width = max((len(check) for check in by_check), default=0)
    rows = [f"{check:<{width}}  {group.line()}" for check, group in folded]
    if len(rows) <= max_lines:
        return Digest(rows, len(errors), 0)
    kept = rows[: max(max_lines - 1, 0)]
    shown = sum(group.count for _, group in folded[: len(kept)])
    return Digest(kept, shown, len(errors) - shown)
