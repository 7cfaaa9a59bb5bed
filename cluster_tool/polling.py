"""How the tool waits on what takes from a second (a gate job on a reserved node, a node with no
job to drain, a BMC that has already switched) to hours (a drain behind a training job, a boot
through PXE): polls start at half a second and double up to the caller's interval. A short wait
ends within about half a second of the event instead of up to a whole interval later; a long one
costs a handful of calls more than a fixed interval would."""

from __future__ import annotations

from collections.abc import Iterator

FIRST_POLL_S = 0.5


def poll_delays(cap_s: float, first_s: float = FIRST_POLL_S) -> Iterator[float]:
    """The pauses between polls: `first_s`, doubling, never above `cap_s` (endless)."""
    delay = min(first_s, cap_s)
    while True:
        yield delay
        delay = min(2 * delay, cap_s)
