"""Issue 17: for every fixture and every collection artefact an operator's capture can carry
(a prompt line, pdsh/clush `host: ` or Open MPI prefixes, colour codes, CRLF, a trailing
tool error), a parser gives what it gives for the clean text or raises ParseError; never a
different result. `read` (what `cluster-tool parse` uses) gives the clean records, per host."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster_tool.errors import ParseError
from cluster_tool.parsers import KINDS, read, to_jsonable
from cluster_tool.parsers.normalise import relocate
from tests.conftest import FIXTURES, REAL_OUTPUTS

# Which parser reads which fixture, by the file name's start.
_KIND_OF = (
    ("all_reduce", "nccl-tests"),
    ("all_gather", "nccl-tests"),
    ("reduce_", "nccl-tests"),
    ("dcgmi_diag", "dcgmi-diag"),
    ("ibnetdiscover", "ibnetdiscover"),
    ("ibsim_net", "ibnetdiscover"),
    ("ibstat_p", "ibstat-p"),
    ("ibstat", "ibstat"),
    ("iblinkinfo", "iblinkinfo"),
    ("ibqueryerrors", "ibqueryerrors"),
    ("perfquery", "perfquery"),
    ("nvidia-smi-q_", "nvidia-smi-q"),
    ("nvidia-smi_topo", "nvidia-smi-topo"),
    ("nvidia-smi-nvlink", "nvidia-smi-nvlink"),
    ("nvidia-smi-query", "nvidia-smi-query"),
    ("dmesg", "xid"),
    ("kernel_log", "xid"),
)


_LARGEST = 200_000


def _fixtures() -> list[tuple[str, str, str]]:
    """(id, kind, clean text) of every fixture its parser reads as it is."""
    paths = sorted(REAL_OUTPUTS.glob("*.txt")) + sorted(
        p for d in ("ib", "nccl", "nvidia", "real") for p in (FIXTURES / "parsers" / d).glob("*")
    )
    cases = []
    for path in paths:
        kind = next((k for prefix, k in _KIND_OF if path.name.startswith(prefix)), None)
        if kind is None:
            continue
        text = _without_source_line(path)
        if len(text) > _LARGEST:
            continue  # read directly in test_captures_as_collected; here it costs ~10 s
        try:
            KINDS[kind].parse(text)
        except ParseError:
            continue  # an excerpt or a failure case: not a clean baseline
        cases.append((path.name, kind, text))
    return cases


def _without_source_line(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    first, _, rest = text.partition("\n")
    # The tests' own fixtures carry '# source:'; ibsim net files and ibnetdiscover output
    # start with comments of their own, which are theirs.
    return rest if first.startswith("# source:") else text


CASES = _fixtures()

_HOSTS = st.from_regex(
    re.compile(r"(gpu|node|dgx-h100-)[0-9]{2,4}(\.cluster\.local)?"), fullmatch=True
)
_PROMPTS = st.sampled_from(
    [
        "$ {cmd}",
        "[root@gpu001 ~]# {cmd}",
        "sh-5.1# {cmd}",
        "root@dgx-h100-17:/home/ops# {cmd}",
        "Executing in Pod nvidia-dcgm-exporter-x7d9k",
        'Defaulted container "nvidia-dcgm-ctr" out of: nvidia-dcgm-ctr, toolkit-validation (init)',
        "+ {cmd}",
    ]
)
_TRAILING = st.sampled_from(
    [
        "ibpanic: [2849] main: stat of IB device 'mlx5_8' failed: No such file or directory",
        "ibwarn: [12345] mad_rpc: _do_madrpc failed; dport (Lid 17)",
        "srun: error: gpu001: task 0: Exited with exit code 1",
        "bash: line 1: 4242 Killed                  {cmd}",
        "Error: unable to connect to host engine at 127.0.0.1:5555.",
        "Unable to determine the device handle for GPU0000:9A:00.0: Unknown Error",
    ]
)


@st.composite
def _artefacts(draw: st.DrawFn, text: str) -> tuple[str, str | None]:
    """The text as a capture might arrive, and the host its prefixes name (if any)."""
    cmd = "the-tool -q"
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if draw(st.booleans()):
        lines.append(draw(_TRAILING).format(cmd=cmd))
    host = None
    style = draw(st.sampled_from(["none", "pdsh", "mpi4", "mpi5"]))
    if style == "pdsh":
        host = draw(_HOSTS)
        lines = [f"{host}: {line}" for line in lines]
    elif style == "mpi4":
        lines = [f"[1,0]<stdout>:{line}" for line in lines]
    elif style == "mpi5":
        lines = [f"[1,0]<stdout>: {line}" for line in lines]
    if draw(st.booleans()):
        lines.insert(0, draw(_PROMPTS).format(cmd=cmd))
    if draw(st.booleans()):
        # grep --color=always: codes around a match, anywhere in a line (one match a line).
        picked = draw(st.sets(st.integers(0, len(lines) - 1), min_size=1, max_size=8))
        for at in picked:
            line = lines[at]
            cut = draw(st.integers(0, len(line)))
            end = draw(st.integers(cut, len(line)))
            lines[at] = (
                line[:cut] + "\x1b[01;31m\x1b[K" + line[cut:end] + "\x1b[m\x1b[K" + line[end:]
            )
    newline = "\r\n" if draw(st.booleans()) else "\n"
    return newline.join(lines) + newline, host


def _hosts_aside(records: object, host: str | None) -> object:
    # A collector's host fills the records' own host field where they have one (Xid events).
    return relocate_hosts(records, host) if host is not None else records


def relocate_hosts(records: object, host: str) -> object:
    if isinstance(records, list):
        return [relocate_hosts(r, host) for r in records]
    is_record = dataclasses.is_dataclass(records) and not isinstance(records, type)
    if is_record and getattr(records, "host", None) == host:
        return dataclasses.replace(records, host=None)  # type: ignore[type-var]
    return records


def _positions_aside(records: object) -> object:
    # Records name the line they came from in the file as given; a prompt line moves them,
    # in `line_no` and in a message's "(line 21)".
    def scrub(value: object) -> object:
        if isinstance(value, str):
            return re.sub(r"\(line \d+\)", "(line N)", value)
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        return value

    return scrub(to_jsonable(relocate(records, lambda _: 0)))


@pytest.mark.parametrize(("name", "kind", "text"), CASES, ids=[c[0] for c in CASES])
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_artefacts_never_change_what_a_parser_reads(
    name: str, kind: str, text: str, data: st.DataObject
) -> None:
    parser = KINDS[kind]
    clean = parser.parse(text)
    captured, host = data.draw(_artefacts(text))
    try:
        direct = parser.read(captured)
    except ParseError:
        direct = None
    if direct is not None:
        (reading,) = direct.hosts
        assert reading.host == host
        assert _positions_aside(_hosts_aside(reading.records, host)) == _positions_aside(clean)
    # The module's function, as the node checks call it: the clean result, or ParseError.
    module = importlib.import_module(parser.parse.__module__)
    public = getattr(module, parser.parse.__name__)
    try:
        result = public(captured)
    except ParseError:
        return
    assert _positions_aside(_hosts_aside(result, host)) == _positions_aside(clean), name


def test_every_kind_has_a_fixture_under_the_property() -> None:
    kinds = {kind for _, kind, _ in CASES}
    assert kinds >= {
        "nccl-tests",
        "dcgmi-diag",
        "ibnetdiscover",
        "ibstat",
        "iblinkinfo",
        "ibqueryerrors",
        "perfquery",
        "nvidia-smi-q",
        "nvidia-smi-topo",
        "nvidia-smi-nvlink",
        "xid",
    }


def test_read_of_a_fixture_is_its_clean_parse() -> None:
    _, kind, text = next(c for c in CASES if c[1] == "ibstat")
    (host,) = read(kind, text).hosts
    assert host.records == KINDS[kind].parse(text) and host.errors == ()
