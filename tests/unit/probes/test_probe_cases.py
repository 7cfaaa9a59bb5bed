"""Every probe's reading, tested as data: one file per case under tests/fixtures/probes/PROBE/,
as pyinfra keeps its fact tests (the command, the output, the expected fact), so that adding a
probe is a recipe and its tests are files.

A case (YAML) holds:

- `command`: the probe's command line, exactly (a changed command is a changed probe);
- the output: `capture`, a file whose line 1 names its public source (`real-outputs/NAME` is
  the shared real captures, any other path is under tests/fixtures), or `output`, the text
  itself, with `source` saying where its format comes from;
- `run` (optional): `{tool, argv}`: the capture is printed by a stand-in `tool` on PATH that
  answers only that argument line, carried back through the one-script-per-node fan-out, and
  must arrive byte for byte before it is read;
- `expected`: figures of the reading, each read by hand from the capture, by path into the
  reading as JSON: `a.b` a field, `3` an item, `*` every item, `#` how many, `.` the whole
  reading; or `error`: the text a ParseError must match.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_tool.errors import ParseError
from cluster_tool.parsers.base import to_jsonable
from cluster_tool.probes import Probe, lines
from cluster_tool.probes.fabric import FABRIC_PROBES
from cluster_tool.probes.node import HEALTH_PROBES
from cluster_tool.probes.signals import GpuClocks, PortCounters
from cluster_tool.remote.fanout import LocalTransport, Target, collect
from tests.conftest import FIXTURES, REAL_OUTPUTS

CASES = FIXTURES / "probes"
# Every probe the tool runs, by the name its output is filed under.
PROBES: dict[str, Probe] = {
    p.name: p for p in (*HEALTH_PROBES, *FABRIC_PROBES, PortCounters(), GpuClocks())
}


@dataclass(frozen=True)
class Case:
    path: Path
    probe: Probe
    data: dict[str, Any]

    @property
    def output(self) -> str:
        """The capture less its source line, or the inline output."""
        if "output" in self.data:
            assert self.data.get("source"), f"{self.path}: say where the output's format is from"
            return str(self.data["output"])
        name = str(self.data["capture"])
        path = (
            REAL_OUTPUTS / name.removeprefix("real-outputs/")
            if name.startswith("real-outputs/")
            else FIXTURES / name
        )
        text = path.read_text(encoding="utf-8")
        assert text.startswith("# source"), f"{path}: line 1 must name the capture's source"
        return text.split("\n", 1)[1]


def _cases() -> list[Case]:
    out = []
    for path in sorted(CASES.glob("*/*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert path.parent.name in PROBES, f"{path}: no probe named {path.parent.name}"
        out.append(Case(path, PROBES[path.parent.name], data))
    return out


def pick(value: Any, path: str) -> Any:
    """The part of a reading (as JSON) that `path` names."""
    if not path:
        return value
    head, _, rest = path.partition(".")
    if head == "":
        return pick(value, rest)
    if head == "#":
        assert not rest, f"'#' ends a path: {path}"
        return len(value)
    if head == "*":
        return [pick(v, rest) for v in value]
    if isinstance(value, list):
        return pick(value[int(head)], rest)
    return pick(value[head], rest)


def _plain(value: Any) -> Any:
    """A reading as JSON; an error it keeps (a half it could not read) as its message."""
    value = to_jsonable(value)
    if isinstance(value, BaseException):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _stand_in(folder: Path, tool: str, argv: str, output: str) -> None:
    """`tool` on PATH printing `output` for `argv` only."""
    (folder / f"{tool}.out").write_text(output, encoding="utf-8")
    script = folder / tool
    script.write_text(
        f'#!/bin/sh\n[ "$*" = "{argv}" ] || {{ echo "unexpected: $*" >&2; exit 2; }}\n'
        f'cat "{folder}/{tool}.out"\n'
    )
    script.chmod(0o755)


def _collected(probe: Probe) -> str:
    result = collect([(Target("gpu001"), (probe,))], LocalTransport())["gpu001"]
    assert result.reachable, result.error
    output = result.outputs[probe.name]
    assert output.rc == 0, output.stderr
    return output.stdout


@pytest.mark.parametrize("case", _cases(), ids=lambda c: f"{c.path.parent.name}/{c.path.stem}")
def test_the_probe_reads_its_case(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, probe = case.data, case.probe
    assert probe.command() == data["command"]
    assert ("expected" in data) != ("error" in data), "a case expects a reading or an error"
    text = case.output
    if "run" in data:
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
        _stand_in(tmp_path, data["run"]["tool"], data["run"]["argv"], text)
        collected = _collected(probe)
        # Carried byte for byte: the probe sees exactly what the tool printed.
        assert collected == text
        text = collected
    if "error" in data:
        with pytest.raises(ParseError, match=data["error"]):
            probe.process(lines(text))
        return
    reading = _plain(probe.process(lines(text)))
    found = {path: pick(reading, str(path)) for path in data["expected"]}
    assert found == data["expected"]


def test_the_path_into_a_reading_reads_fields_items_counts_and_the_whole() -> None:
    reading = {"gpus": [{"pci": "a"}, {"pci": "b"}], "driver": "535"}
    assert pick(reading, "driver") == "535"
    assert pick(reading, "gpus.#") == 2
    assert pick(reading, "gpus.*.pci") == ["a", "b"]
    assert pick(reading, "gpus.1.pci") == "b"
    assert pick(reading, ".") == reading


def test_every_probe_has_a_case() -> None:
    """The recipe for a probe ends with its cases: a probe nobody tested as data fails here."""
    tested = {case.path.parent.name for case in _cases()}
    assert sorted(set(PROBES) - tested) == []
