"""`mlxlink -d DEV [-m] [-c] [-e] [--json]`: one HCA port's link state, FEC and BER counters,
the FEC histogram and the cable module behind it (temperature, voltage, vendor, part and serial,
firmware)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from cluster_tool.parsers.base import ParseError, noise_recorder, parser

__all__ = ["MlxlinkModule", "MlxlinkPort", "parse_mlxlink"]

# A section title is a line of text followed by a rule of dashes as long as the title.
_RULE = re.compile(r"^-{4,}$")
# `Key [unit]      : value`: mlxlink pads keys to 35 columns; some releases end values in a space.
_FIELD = re.compile(r"^(?P<key>[^:]*?\S)\s*: ?(?P<value>.*)$")
# The command that printed what follows, as an operator's capture keeps it (`$ sudo mlxlink
# -d mlx5_0 -m -c` after a prompt): it opens a new port and names the device.
_COMMAND = re.compile(r"(?:^|[\s$#>])(?:sudo\s+)?mlxlink\s(?P<args>.*)$")
_DEVICE_ARG = re.compile(r"(?:^|\s)(?:-d|--device)[\s=](?P<dev>\S+)")
_PORT_ARG = re.compile(r"(?:^|\s)(?:-p|--port)[\s=](?P<port>\d{1,20})")
# A shell prompt with nothing after it (the end of a pasted session).
_BARE_PROMPT = re.compile(r"^\S+@\S+:\S*[$#]$")
# `49 [-10..80]`: a reading and the module's own alarm range.
_RANGED = re.compile(
    r"^(?P<value>-?\d+(?:\.\d+)?)\s*\[(?P<low>-?\d+(?:\.\d+)?)\.\.(?P<high>-?\d+(?:\.\d+)?)\]$"
)
# mlxlink prints BER as mantissa E exponent (`15E-255`, `2E-9`), sometimes lower case.
_BER = re.compile(r"^\d+(?:\.\d+)?[eE][-+]?\d+$|^0$")


@dataclass(frozen=True)
class MlxlinkModule:
    """The cable or transceiver in the port (`Module Info`, `-m`). None where mlxlink printed
    N/A; a passive copper cable reports no temperature or voltage (N/A, or `0 [0..0]`)."""

    identifier: str | None = None  # QSFP28, OSFP, ...
    cable_type: str | None = None
    vendor: str | None = None
    part_number: str | None = None
    serial: str | None = None
    revision: str | None = None
    firmware: str | None = None  # the module's own firmware (`FW Version`)
    temperature_c: float | None = None
    temperature_range_c: tuple[float, float] | None = None  # the module's alarm range
    voltage_mv: float | None = None
    length_m: float | None = None


@dataclass(frozen=True)
class MlxlinkPort:
    """One `mlxlink` run on one port. Counters are None when `-c` was not given; they count
    since `time_since_clear_min` minutes ago (mlxlink's own clear, or the last link up)."""

    line_no: int
    device: str | None = None  # as given to -d (mlx5_0, /dev/mst/mt4129_pciconf0, 81:00.0)
    port: int | None = None  # as given to -p
    state: str | None = None  # Active, ...
    physical_state: str | None = None  # LinkUp, ETH_AN_FSM_ENABLE, Polling, ...
    speed: str | None = None  # IB-NDR, IB-HDR, 100G, 200G_4X, ...
    width: str | None = None  # 4x
    fec: str | None = None  # the FEC mode in use, as mlxlink names it
    status_opcode: int | None = None  # 0 when mlxlink sees no issue
    recommendation: str | None = None
    firmware: str | None = None  # the adapter's firmware (`Tool Information`)
    mft_version: str | None = None
    time_since_clear_min: float | None = None
    effective_errors: int | None = None  # errors left after FEC: what the link layer saw
    effective_ber: float | None = None
    raw_errors_per_lane: tuple[int, ...] | None = None  # before FEC
    raw_ber: float | None = None
    raw_ber_per_lane: tuple[float, ...] | None = None  # MFT 4.32 and later
    # What newer releases print for HDR/NDR beside the effective figures: the symbol errors
    # left after FEC, which ibdiagnet calls the errors the application sees on those links.
    symbol_errors: int | None = None
    symbol_ber: float | None = None
    link_down: int | None = None
    link_error_recovery: int | None = None
    fec_corrected_blocks: int | None = None  # RS-FEC counters, where the release prints them
    fec_uncorrectable_blocks: int | None = None
    # `Histogram of FEC Errors` (--rx_fec_histogram --show_histogram): codewords per number of
    # symbol errors FEC corrected in them, bin 0 first; a history of the link's margin.
    fec_histogram: tuple[int, ...] | None = None
    module: MlxlinkModule | None = None
    # Every field of every section as printed (N/A kept), for what the record does not name.
    fields: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def is_infiniband(self) -> bool:
        return self.speed is not None and self.speed.upper().startswith("IB-")

    @property
    def generation(self) -> str | None:
        """The InfiniBand generation (NDR, HDR, ...) of an IB port, else None."""
        return self.speed.split("-", 1)[1].upper() if self.is_infiniband and self.speed else None


def _text(value: str) -> str | None:
    value = value.strip()
    return None if value in ("", "N/A") else value


def _number(value: str, what: str, line_no: int, line: str) -> float | None:
    text = _text(value)
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        raise ParseError(f"{what} is not a number: {text!r}", line_no=line_no, line=line) from None


def _count(value: str, what: str, line_no: int, line: str) -> int | None:
    text = _text(value)
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 20:
        raise ParseError(f"{what} is not a count: {text!r}", line_no=line_no, line=line)
    return int(text)


def _ber(value: str, what: str, line_no: int, line: str) -> float | None:
    text = _text(value)
    if text is None:
        return None
    if not _BER.match(text):
        raise ParseError(
            f"{what} is not a BER like '15E-255': {text!r}", line_no=line_no, line=line
        )
    return float(text)


def _ranged(
    value: str, what: str, line_no: int, line: str
) -> tuple[float | None, tuple[float, float] | None]:
    text = _text(value)
    if text is None:
        return None, None
    match = _RANGED.match(text)
    if match is None:
        return _number(text, what, line_no, line), None
    return float(match["value"]), (float(match["low"]), float(match["high"]))


class _Port:
    """What one run has printed so far."""

    def __init__(self, line_no: int, device: str | None, port: int | None) -> None:
        self.line_no = line_no
        self.device = device
        self.port = port
        self.sections: dict[str, dict[str, str]] = {}
        self.lines: dict[tuple[str, str], tuple[int, str]] = {}
        self.histogram: tuple[int, ...] | None = None

    def value(self, section: str, key: str) -> tuple[str, int, str] | None:
        found = self.sections.get(section, {}).get(key)
        if found is None:
            return None
        line_no, line = self.lines[(section, key)]
        return found, line_no, line

    def build(self) -> MlxlinkPort:
        def text(section: str, key: str) -> str | None:
            got = self.value(section, key)
            return _text(got[0]) if got else None

        def count(section: str, key: str) -> int | None:
            got = self.value(section, key)
            return _count(got[0], key, got[1], got[2]) if got else None

        def ber(section: str, key: str) -> float | None:
            got = self.value(section, key)
            return _ber(got[0], key, got[1], got[2]) if got else None

        def number(section: str, key: str) -> float | None:
            got = self.value(section, key)
            return _number(got[0], key, got[1], got[2]) if got else None

        op, tb, tool = "Operational Info", "Troubleshooting Info", "Tool Information"
        counters = "Physical Counters and BER Info"
        lanes = self.value(counters, "Raw Physical Errors Per Lane")
        per_lane = None
        if lanes is not None and _text(lanes[0]) is not None:
            per_lane = tuple(
                _count(v, "Raw Physical Errors Per Lane", lanes[1], lanes[2]) or 0
                for v in lanes[0].split(",")
            )
        ber_lanes = self.value(counters, "Raw Physical BER Per Lane")
        per_lane_ber = None
        if ber_lanes is not None and _text(ber_lanes[0]) is not None:
            per_lane_ber = tuple(
                _ber(v, "Raw Physical BER Per Lane", ber_lanes[1], ber_lanes[2]) or 0.0
                for v in ber_lanes[0].split(",")
            )
        return MlxlinkPort(
            line_no=self.line_no,
            device=self.device,
            port=self.port,
            state=text(op, "State"),
            physical_state=text(op, "Physical state"),
            speed=text(op, "Speed"),
            width=text(op, "Width"),
            fec=text(op, "FEC"),
            status_opcode=count(tb, "Status Opcode"),
            recommendation=text(tb, "Recommendation"),
            firmware=text(tool, "Firmware Version"),
            mft_version=text(tool, "MFT Version"),
            time_since_clear_min=number(counters, "Time Since Last Clear [Min]"),
            effective_errors=count(counters, "Effective Physical Errors"),
            effective_ber=ber(counters, "Effective Physical BER"),
            raw_errors_per_lane=per_lane,
            raw_ber=ber(counters, "Raw Physical BER"),
            raw_ber_per_lane=per_lane_ber,
            symbol_errors=count(counters, "Symbol Errors"),
            symbol_ber=ber(counters, "Symbol BER"),
            link_down=count(counters, "Link Down Counter"),
            link_error_recovery=count(counters, "Link Error Recovery Counter"),
            fec_corrected_blocks=count(counters, "RS-FEC Corrected Blocks"),
            fec_uncorrectable_blocks=count(counters, "RS-FEC Uncorrectable Blocks"),
            fec_histogram=self.histogram,
            module=self._module(),
            fields={name: dict(values) for name, values in self.sections.items()},
        )

    def _module(self) -> MlxlinkModule | None:
        section = "Module Info"
        if section not in self.sections:
            return None

        def text(key: str) -> str | None:
            got = self.value(section, key)
            return _text(got[0]) if got else None

        temperature, temperature_range = None, None
        got = self.value(section, "Temperature [C]")
        if got is not None:
            temperature, temperature_range = _ranged(got[0], "Temperature [C]", got[1], got[2])
        voltage = None
        got = self.value(section, "Voltage [mV]")
        if got is not None:
            voltage = _ranged(got[0], "Voltage [mV]", got[1], got[2])[0]
        length = None
        got = self.value(section, "Transfer Distance [m]")
        if got is not None:
            length = _number(got[0], "Transfer Distance [m]", got[1], got[2])
        return MlxlinkModule(
            identifier=text("Identifier"),
            cable_type=text("Cable Type"),
            vendor=text("Vendor Name"),
            part_number=text("Vendor Part Number"),
            serial=text("Vendor Serial Number"),
            revision=text("Rev"),
            firmware=text("FW Version"),
            temperature_c=temperature,
            temperature_range_c=temperature_range,
            voltage_mv=voltage,
            length_m=length,
        )


_HISTOGRAM = "Histogram of FEC Errors"
# A key of pretty-printed JSON at the start of its line: `    "Bin 1": {`.
_JSON_KEY = re.compile(r'\s*("(?:[^"\\]|\\.)*")\s*:')
_BIN = re.compile(r"^Bin ([0-9]{1,20})$")


def _flat(value: object) -> str | None:
    """A field of `--json` output as the text output prints it: per-lane and list values
    (`{"values": [...]}`) joined with commas; None for what has no text form (histogram bins)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("values"), list):
        items = value["values"]
        if all(isinstance(v, str) for v in items):
            return ",".join(items)
    return None


def _json_port(
    document: object, lines: list[str], start: int, command: tuple[int, str | None, int | None]
) -> _Port:
    """One `mlxlink --json` document (its first line is `start`, 0-based) as the sections the
    text output would have printed."""
    at, device, port_no = command

    # Each key's first line from `start` on, indexed in one pass: a search per key was
    # quadratic in a long document.
    first: dict[str, int] = {}
    for index in range(start, len(lines)):
        found = _JSON_KEY.match(lines[index])
        if found is not None:
            first.setdefault(found[1], index)

    def line_of(key: str) -> tuple[int, str]:
        index = first.get(json.dumps(key))
        if index is None:
            return start + 1, lines[start]
        return index + 1, lines[index]

    if not isinstance(document, dict):
        raise ParseError("expected an mlxlink --json object", line_no=start + 1, line=lines[start])
    status = document.get("status")
    if isinstance(status, dict) and status.get("code") not in (0, None):
        message = str(status.get("message") or "no message")[:200]
        raise ParseError(f"mlxlink failed: {message}", line_no=start + 1, line=lines[start])
    result = document.get("result")
    output = result.get("output") if isinstance(result, dict) else None
    if not isinstance(output, dict):
        raise ParseError(
            "mlxlink --json output without result.output", line_no=start + 1, line=lines[start]
        )
    port = _Port(at, device, port_no)
    for title, section in output.items():
        if not isinstance(section, dict):
            continue
        if title == _HISTOGRAM:
            port.histogram = _json_histogram(section, line_of)
            continue
        port.sections[title] = {}
        for key, value in section.items():
            text = _flat(value)
            if text is None:
                continue
            port.sections[title][key] = text.strip()
            port.lines[(title, key)] = line_of(key)
    return port


def _json_histogram(
    section: dict[str, object], line_of: Callable[[str], tuple[int, str]]
) -> tuple[int, ...]:
    counts: dict[int, int] = {}
    for key, value in section.items():
        match = _BIN.match(key)
        if match is None:
            continue  # the Header row
        text = _flat(value)
        parts = text.split(",") if text is not None else []
        count = parts[1].strip() if len(parts) == 2 else ""
        # ASCII digits, 20 at most: '²'.isdigit() is true and int() refuses it.
        if not (count.isascii() and count.isdigit()) or len(count) > 20:
            line_no, line = line_of(key)
            raise ParseError(f"{key}: expected [range] and a count", line_no=line_no, line=line)
        counts[int(match[1])] = int(count)
    if sorted(counts) != list(range(len(counts))):
        line_no, line = line_of(_HISTOGRAM)
        raise ParseError(
            f"FEC histogram bins are not 0..N: {sorted(counts)}", line_no=line_no, line=line
        )
    return tuple(counts[b] for b in range(len(counts)))


@parser(
    "mlxlink",
    "mlxlink -d DEV [-m -c -e] [--json]: link state, FEC, BER counters, the FEC histogram and "
    "the cable module per port",
    start=r"(?:^|[\s$#>])mlxlink\s|^Operational Info\s*$|^\{\s*$",
)
def parse_mlxlink(text: str) -> list[MlxlinkPort]:
    """Parse one or more `mlxlink` runs (each after its command line, or one after another),
    text or `--json`."""
    lines = text.splitlines()
    offsets = [0]
    for raw_line in lines:
        offsets.append(offsets[-1] + len(raw_line) + 1)
    flat = "\n".join(lines)
    decoder = json.JSONDecoder()
    note = noise_recorder()
    ports: list[_Port] = []
    current: _Port | None = None
    section: str | None = None
    pending_command: tuple[int, str | None, int | None] | None = None
    i = 0
    while i < len(lines):
        raw = lines[i]
        line = raw.strip()
        line_no = i + 1
        i += 1
        if not line:
            continue
        command = _COMMAND.search(line)
        if command is not None:
            dev_arg = _DEVICE_ARG.search(" " + command["args"])
            port_arg = _PORT_ARG.search(" " + command["args"])
            pending_command = (
                line_no,
                dev_arg["dev"] if dev_arg else None,
                int(port_arg["port"]) if port_arg else None,
            )
            current, section = None, None
            continue
        if _BARE_PROMPT.match(line):
            if note is not None:
                note(line_no)
            continue
        if line.startswith("-W-"):  # mlxlink's warnings (stderr, captured with 2>&1)
            if note is not None:
                note(line_no)
            continue
        if line.startswith("-E-"):
            raise ParseError(f"mlxlink failed: {line[3:].strip()}", line_no=line_no, line=raw)
        if line.startswith("{"):  # `--json`: one document per run
            try:
                document, end = decoder.raw_decode(flat, offsets[i - 1] + raw.index("{"))
            except (ValueError, RecursionError) as exc:
                raise ParseError(
                    f"not mlxlink --json output: {str(exc)[:120]}", line_no=line_no, line=raw
                ) from None
            command_at = pending_command or (line_no, None, None)
            ports.append(_json_port(document, lines, i - 1, command_at))
            pending_command, current, section = None, None, None
            while i < len(lines) and offsets[i] < end:
                i += 1
            continue
        if i < len(lines) and _RULE.match(lines[i].strip()):
            title = line
            if current is None or title in current.sections:
                at, device, port = pending_command or (line_no, None, None)
                current = _Port(at, device, port)
                ports.append(current)
                pending_command = None
            section = title
            current.sections[section] = {}
            i += 1  # the rule
            continue
        if current is None or section is None:
            raise ParseError(
                "expected a section title such as 'Operational Info' over a rule of dashes",
                line_no=line_no,
                line=raw,
            )
        match = _FIELD.match(line)
        if match is None:
            raise ParseError(
                f"expected 'Key : value' in section {section!r}", line_no=line_no, line=raw
            )
        key = re.sub(r"\s+", " ", match["key"])
        current.sections[section][key] = match["value"].strip()
        current.lines[(section, key)] = (line_no, raw)
    if pending_command is not None and not ports:
        raise ParseError(
            "mlxlink printed nothing after its command line", line_no=pending_command[0]
        )
    if not ports:
        raise ParseError("expected mlxlink output ('Operational Info' and its rule); found none")
    return [port.build() for port in ports]
