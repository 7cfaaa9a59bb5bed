"""Limits on what a few bytes of input may ask for: hosts a hostlist expands to, the width a
format field pads to, nodes a model is asked about. Each is checked before the work is done,
so a hostile or mistyped value is a one-line error at once, not minutes and gigabytes later."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

from cluster_tool.errors import UsageError

# The largest cluster anyone plans with this tool is a few thousand nodes; a hostlist (or a
# spec's hostlists together) past this is a typo or an attack.
MAX_HOSTS = 65_536
# A host name or a BMC address never needs a field padded wider than this.
MAX_FORMAT_WIDTH = 64

_BRACKET = re.compile(r"\[([^\[\]]*+)\]")
_RANGE = re.compile(r"(\d++)(?:-(\d++))?(?:/(\d++))?")
_WIDTH = re.compile(r"(\d+)")
# What a hostlist may hold: ClusterShell also reads `@group` (its group resolver may run
# commands from groups.conf) and set operators (`!`, `&`, `^`), which no node name needs.
_HOSTLIST_CHARS = re.compile(r"[A-Za-z0-9\[\],._-]*+")
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
# A range bound longer than this is past any limit (and int() of thousands of digits is slow).
_BIG = 18


class HostlistError(UsageError):
    """Text that is not a hostlist (or not a host name): one line, exit 2."""


class HostlistTooLarge(UsageError):
    """A hostlist naming more hosts than the bound: one line, exit 2. Not a HostlistError, so
    that a caller reading a malformed hostlist as "no names" still stops here."""


def hostlist_size(text: str) -> int:
    """An upper bound on the hosts a hostlist (`gpu[001-128],login[1-2]`, or a comma list)
    expands to, worked out from the bracket ranges and the commas without expanding anything
    (ClusterShell would build every one)."""
    total = 0
    depth = 0
    start = 0
    for i, char in enumerate(text + ","):
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(0, depth - 1)
        elif char == "," and depth == 0:
            total += _pattern_size(text[start:i])
            start = i + 1
    return total


def _pattern_size(pattern: str) -> int:
    size = 1
    for group in _BRACKET.findall(pattern):
        count = 0
        for item in group.split(","):
            match = _RANGE.fullmatch(item.strip())
            if match is None:
                count += 1
                continue
            low, high, step = match.group(1), match.group(2), match.group(3)
            if high is None:
                count += 1
            elif max(len(low), len(high), len(step or "")) > _BIG:
                count += 10**_BIG
            else:
                span = abs(int(high) - int(low)) + 1
                count += -(-span // max(1, int(step or 1)))
        size *= max(1, count)
    return size


def check_hostlist_size(text: str, limit: int = MAX_HOSTS) -> None:
    """ValueError when `text` expands to more than `limit` hosts."""
    size = hostlist_size(text)
    if size > limit:
        raise ValueError(f"hostlist {_short(text)} expands to {size} hosts, over the limit {limit}")


def expand_hostlist(text: str, what: str, limit: int = MAX_HOSTS) -> list[str]:
    """The hosts of a hostlist in NodeSet order: the one expansion every path that reads node
    names uses (the spec, the command line, run records, captures, Slurm's output). Counted
    before anything is expanded, comma lists as well as ranges; HostlistError (one line,
    naming `what`) for text that is not a plain hostlist, HostlistTooLarge for one naming
    more than `limit` hosts."""
    from ClusterShell.NodeSet import NodeSet

    if not text:
        return []
    if not _HOSTLIST_CHARS.fullmatch(text):
        raise HostlistError(
            f"{what}: not a valid hostlist {_short(text)}: only letters, digits, `[`, `]`, `,`, "
            "`.`, `_`, `-`"
        )
    try:
        check_hostlist_size(text, limit)
    except ValueError as exc:
        raise HostlistTooLarge(f"{what}: {exc}") from None
    try:
        return list(NodeSet(text))
    except Exception as exc:  # ClusterShell raises its own and ValueError/TypeError
        raise HostlistError(f"{what}: not a valid hostlist {_short(text)}: {exc}") from None


def fold_hostlist(names: Iterable[str], what: str, limit: int = MAX_HOSTS) -> str:
    """Names folded to a hostlist (`gpu[001-004]`). NodeSet reads each name as a hostlist of its
    own, so a name from a record or a capture (`gpu[1-3000000]`) is counted first, together
    with the others: HostlistError past `limit`."""
    from ClusterShell.NodeSet import NodeSet

    listed = list(names)
    total = sum(hostlist_size(name) for name in listed)
    if total > limit:
        raise HostlistTooLarge(
            f"{what}: {_short(','.join(listed))} expand to {total} hosts, over the limit {limit}"
        )
    try:
        return str(NodeSet.fromlist(listed))
    except Exception as exc:  # ClusterShell raises its own and ValueError/TypeError
        raise HostlistError(f"{what}: not host names {_short(','.join(listed))}: {exc}") from None


def host_name(text: object, what: str) -> str:
    """`text` when it is one host name (no range, no list); else HostlistError naming `what`."""
    if not isinstance(text, str) or not _HOST_NAME.fullmatch(text):
        raise HostlistError(f"{what}: {_short(str(text))} is not a host name")
    return text


def format_widths(pattern: str) -> list[int]:
    """The widths and precisions the fields of a Python format string ask for (`{number:03d}`
    -> [3]); empty when the text is not a format string."""
    try:
        fields = list(string.Formatter().parse(pattern))
    except ValueError:
        return []
    widths: list[int] = []
    for _, name, spec, _ in fields:
        if name is not None and spec:
            widths += [int(w) for w in _WIDTH.findall(spec)]
    return widths


def check_format_widths(pattern: str, limit: int = MAX_FORMAT_WIDTH) -> None:
    """ValueError when a field of the format string pads or cuts wider than `limit`."""
    widest = max(format_widths(pattern), default=0)
    if widest > limit:
        raise ValueError(f"format field width {widest} is over the limit {limit}")


def check_count(value: int, option: str, low: int = 1, high: int = MAX_HOSTS) -> int:
    """`value` when `low <= value <= high`, else a one-line UsageError naming the option."""
    if not low <= value <= high:
        raise UsageError(f"{option} {value}: must be between {low} and {high}")
    return value


def _short(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")
