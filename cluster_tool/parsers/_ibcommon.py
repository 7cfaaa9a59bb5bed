"""What the InfiniBand parsers share: GUID spelling, speed names, numbers that name their line."""

from __future__ import annotations

from cluster_tool.errors import ParseError

_HEX = frozenset("0123456789abcdefABCDEF")

# Per-lane signalling rate (Gb/s, as iblinkinfo prints it) -> the IBTA generation name.
LANE_SPEED_NAMES: dict[float, str] = {
    2.5: "SDR",
    5.0: "DDR",
    10.0: "QDR",
    14.0625: "FDR",
    25.78125: "EDR",
    53.125: "HDR",
    106.25: "NDR",
    212.5: "XDR",
}

# Per-lane rate of each generation as `ibstat` counts it in `Rate:` (4X QDR = 40, 4X FDR = 56,
# 4X NDR = 400, 2X NDR = 200), so a link seen in ibnetdiscover compares with a host's ibstat.
GENERATION_LANE_GBPS: dict[str, float] = {
    "SDR": 2.5,
    "DDR": 5.0,
    "QDR": 10.0,
    "FDR10": 10.0,
    "FDR": 14.0,
    "EDR": 25.0,
    "HDR": 50.0,
    "NDR": 100.0,
    "XDR": 200.0,
}


def link_rate_gbps(width: int | None, speed: str | None) -> float | None:
    """The link rate `ibstat` would print for WIDTHxSPEED: (4, "NDR") -> 400.0."""
    if width is None or speed is None or speed not in GENERATION_LANE_GBPS:
        return None
    return width * GENERATION_LANE_GBPS[speed]


def normalize_guid(text: str) -> str:
    """A GUID as `0x` + 16 lowercase hex digits; text that is not plain hex (a redacted GUID
    such as `0x9c05<redacted>`) is kept as written, with one `0x` prefix, so it still compares."""
    body = text.strip()
    if body[:2] in ("0x", "0X"):
        body = body[2:]
    # frozenset.issuperset walks the string in C: this runs for every port of a fabric.
    if 0 < len(body) <= 16 and _HEX.issuperset(body):
        return "0x" + body.lower().zfill(16)
    return "0x" + body.lower()


def to_int(value: str, what: str, line_no: int, line: str) -> int:
    """An integer field (decimal or 0x hex), or a ParseError naming the line."""
    try:
        return int(value, 16) if value[:2] in ("0x", "0X") else int(value)
    except ValueError:
        raise ParseError(f"{what} is not a number: {value!r}", line_no=line_no, line=line) from None


def to_float(value: str, what: str, line_no: int, line: str) -> float:
    """A decimal field, or a ParseError naming the line."""
    try:
        number = float(value)
    except ValueError:
        raise ParseError(f"{what} is not a number: {value!r}", line_no=line_no, line=line) from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ParseError(f"{what} is not a finite number: {value!r}", line_no=line_no, line=line)
    return number
