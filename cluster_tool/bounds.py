"""Limits on what a few bytes of input may ask for: hosts a hostlist expands to, the width a
format field pads to, nodes a model is asked about. Each is checked before the work is done,
so a hostile or mistyped value is a one-line error at once, not minutes and gigabytes later."""

from __future__ import annotations

import re
import string

from cluster_tool.errors import UsageError

# The largest cluster anyone plans with this tool is a few thousand nodes; a hostlist (or a
# spec's hostlists together) past this is a typo or an attack.
MAX_HOSTS = 65_536
# A host name or a BMC address never needs a field padded wider than this.
MAX_FORMAT_WIDTH = 64

_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?(?:/(\d+))?")
_WIDTH = re.compile(r"(\d+)")


def hostlist_size(text: str) -> int:
    """An upper bound on the hosts a hostlist (`gpu[001-128],login[1-2]`) expands to, worked
    out from the bracket ranges without expanding them (ClusterShell would build every one)."""
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


def bounded_hostlist(text: str, option: str, limit: int = MAX_HOSTS) -> list[str]:
    """The hosts of a hostlist given on the command line; UsageError (one line) when it is not
    a hostlist or expands past `limit`."""
    from ClusterShell.NodeSet import NodeSet, NodeSetException

    try:
        check_hostlist_size(text, limit)
        return list(NodeSet(text))
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None
    except NodeSetException as exc:
        raise UsageError(f"{option}: not a hostlist {_short(text)}: {exc}") from None


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
