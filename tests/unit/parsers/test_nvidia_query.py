"""`nvidia-smi --query-gpu ... --format=csv[,noheader][,nounits]` for any field list."""

from __future__ import annotations

import pytest

from cluster_tool.parsers import ParseError
from cluster_tool.parsers.nvidia_query import parse_query_csv
from tests.unit.parsers._nvidia import fixture

FIELDS = [
    "index",
    "name",
    "pci.bus_id",
    "uuid",
    "serial",
    "persistence_mode",
    "pstate",
    "temperature.gpu",
    "memory.total",
    "memory.used",
    "power.draw",
    "power.limit",
    "fan.speed",
    "ecc.errors.uncorrected.volatile.total",
    "pcie.link.gen.current",
    "pcie.link.width.current",
    "clocks_event_reasons.active",
]


def test_header_with_units_types_every_value() -> None:
    result = parse_query_csv(fixture("nvidia-smi-query_h100x8_csv_header_units.txt"))
    assert result.header is True
    assert list(result.fields) == FIELDS
    assert result.units["memory.total"] == "MiB" and result.units["power.draw"] == "W"
    assert result.units["index"] is None
    assert len(result.rows) == 8
    first = result.rows[0]
    assert first["index"] == 0
    assert first["name"] == "NVIDIA H100 80GB HBM3"
    assert first["pci.bus_id"] == "00000000:19:00.0"
    assert first["serial"] == "1650124031592"  # an identifier, kept as text
    assert first["temperature.gpu"] == 29
    assert first["memory.total"] == 81559
    assert first["power.draw"] == pytest.approx(67.74)
    assert first["power.limit"] == 700.0
    assert first["fan.speed"] is None  # [N/A]
    assert first["ecc.errors.uncorrected.volatile.total"] == 0
    assert (first["pcie.link.gen.current"], first["pcie.link.width.current"]) == (5, 16)
    assert first["clocks_event_reasons.active"] == "0x0000000000000088"
    assert [r["index"] for r in result.rows] == list(range(8))
    assert result.rows[7]["pci.bus_id"] == "00000000:DB:00.0"


def test_noheader_nounits_with_field_list_gives_the_same_values() -> None:
    with_header = parse_query_csv(fixture("nvidia-smi-query_h100x8_csv_header_units.txt"))
    bare = parse_query_csv(
        fixture("nvidia-smi-query_h100x8_csv_noheader_nounits.txt"), fields=FIELDS
    )
    assert bare.header is False
    assert [r.values for r in bare.rows] == [r.values for r in with_header.rows]


def test_field_list_as_the_comma_string_passed_to_nvidia_smi() -> None:
    text = "0, 29, 81559 MiB, 67.74 W, [Not Supported]\n"
    result = parse_query_csv(text, "index,temperature.gpu,memory.total,power.draw,fan.speed")
    row = result.rows[0]
    # Units are stripped even without a header that names them.
    assert row.values == {
        "index": 0,
        "temperature.gpu": 29,
        "memory.total": 81559,
        "power.draw": 67.74,
        "fan.speed": None,
    }


def test_header_given_with_field_list_is_recognised_and_aliases_match() -> None:
    text = fixture("nvidia-smi-query_h100_vbios_ml_engineering.txt")
    result = parse_query_csv(text, ["gpu_name", "gpu_bus_id", "vbios_version"])
    assert result.header is True
    assert [r["gpu_bus_id"] for r in result.rows] == ["00000000:04:00.0", "00000000:8B:00.0"]
    assert result.rows[0]["vbios_version"] == "96.00.89.00.01"
    plain = parse_query_csv(text)
    assert plain.fields == ("name", "pci.bus_id", "vbios_version")


def test_driver_version_stays_text() -> None:
    result = parse_query_csv("driver_version, count\n418.67, 4\n")
    assert result.rows[0].values == {"driver_version": "418.67", "count": 4}


def test_no_devices_is_no_rows() -> None:
    assert parse_query_csv("No devices were found\n", ["index"]).rows == ()


@pytest.mark.parametrize(
    ("text", "fields", "message"),
    [
        ("", None, "empty"),
        ("NVIDIA H100 80GB HBM3, 00000000:19:00.0\n", None, "CSV header"),
        ('Field "device_minor" is not a valid field to query.\n', ["index"], "reported an error"),
        ("index, uuid\n0, GPU-1, extra\n", None, "expected 2 comma-separated values"),
        ("index, memory.total [MiB]\n0\n", None, "expected 2"),
        ("index, pci.bus_id\n0, 00000000:19:00.0\n", ["index", "uuid"], "header names"),
        ("index, index\n0, 0\n", None, "named twice"),
    ],
)
def test_wrong_shape_raises_parse_error(text: str, fields: list[str] | None, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_query_csv(text, fields)
