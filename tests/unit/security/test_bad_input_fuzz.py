"""Issue 32: every bad input is one line and exit 2, never "internal error" (exit 1) or a
traceback. The nine inputs the issue found, each a case, then a fuzz over specs, run records,
captures, context files and node files: whatever a mutated file holds, the command reads it or
refuses it with exit 2."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster_tool.checks.node import expectations_for, read_node_file
from cluster_tool.cli import main
from cluster_tool.context import SiteContext, load_context, save_context
from cluster_tool.errors import UsageError
from cluster_tool.findings import Finding
from cluster_tool.remote.fanout import HostResult, ProbeOutput, save_capture
from cluster_tool.spec import load_spec
from cluster_tool.workflows.runs import RunRecord
from tests.conftest import REPO
from tests.unit.parsers.mutations import mutated

LAB = REPO / "examples" / "lab.yml"
LAB_TEXT = LAB.read_text(encoding="utf-8")
DEEP = "[" * 100_000 + "]" * 100_000
VERSIONS = "kernel 6.1.0-27-amd64\nmodule nvidia 550.127.08\n"


def _one_line_exit_2(args: list[str], capsys: pytest.CaptureFixture[str], *expect: str) -> str:
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "internal error" not in err and "Traceback" not in err, err
    for text in expect:
        assert text in err, err
    return err


# --- the nine ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "expect"),
    [
        (lambda t: t.replace("name: lab", "name: la\x00b", 1), "U+0000"),  # raw NUL
        (lambda t: t.replace("name: lab", "name: la\x1bb", 1), "U+001B"),  # raw ESC
        (lambda t: t.replace("leaf_ports: 40", "leaf_ports: " + "9" * 5000), "5000 characters"),
        (
            lambda t: t.replace("address: 10.77.0.11", "address: 255.255.255.254"),
            "do not fit in the management network",
        ),
    ],
    ids=["nul", "esc", "5000-digit-integer", "address-past-255.255.255.255"],
)
def test_a_bad_spec_is_one_located_line_and_exit_2(
    edit: Any, expect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "c.yml"
    spec.write_text(edit(LAB_TEXT), encoding="utf-8")
    err = _one_line_exit_2(["spec", "check", str(spec)], capsys, expect)
    assert err.startswith(f"{spec}:")


def _finished(tmp_path: Path) -> RunRecord:
    record = RunRecord.create(tmp_path / "runs", "bringup", {"spec": str(LAB)})
    summary = {"command": "bringup", "verdict": "fail", "nodes": {"gpu001": {"verdict": "fail"}}}
    record.finish(summary, [Finding(check="gpu.xid", node="gpu001", message="Xid 79")])
    return record


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        ('{"findings": ' + DEEP + "}", "nested too deeply"),
        ('{"findings": [{"check": "gpu.xid", "node": "gpu001", "value": 1e400}]}', "1e400"),
        (
            '{"findings": [{"check": "gpu.xid", "node": "gpu001", "message": "\\ud800"}]}',
            "surrogate",
        ),
    ],
    ids=["deep-json", "1e400", "lone-surrogate"],
)
def test_a_bad_record_given_to_report_is_exit_2_and_leaves_the_report_whole(
    content: str, expect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = _finished(tmp_path)
    before = {n: (record.path / n).read_bytes() for n in ("junit.xml", "report.html")}
    (record.path / "findings.json").write_text(content)
    _one_line_exit_2(["report", str(record.path)], capsys, expect)
    assert {n: (record.path / n).read_bytes() for n in before} == before


def test_a_surrogate_that_reaches_the_writer_rewrites_neither_file(tmp_path: Path) -> None:
    # The second line: a record the reader let through cannot leave junit.xml new and
    # report.html old.
    from cluster_tool.report import write_rendered

    record = _finished(tmp_path)
    before = {n: (record.path / n).read_bytes() for n in ("junit.xml", "report.html")}
    summary = {"command": "bringup", "verdict": "pass", "headline": "ok \ud800"}
    with pytest.raises(UsageError, match="surrogate"):
        write_rendered(record.path, summary, [])
    assert {n: (record.path / n).read_bytes() for n in before} == before


def _capture(tmp_path: Path) -> Path:
    folder = tmp_path / "capture"
    names = [n.name for n in load_spec(LAB).gpu_nodes()]
    save_capture(folder, {n: HostResult(n, {"versions": ProbeOutput(0, VERSIONS)}) for n in names})
    return folder


def test_a_deep_capture_manifest_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _capture(tmp_path)
    (folder / "manifest.json").write_text('{"version": 1, "hosts": ' + DEEP + "}")
    args = ["versions", "--spec", str(LAB), "--from", str(folder)]
    _one_line_exit_2(args, capsys, "manifest.json", "nested too deeply")


def test_a_deep_context_file_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLUSTER_TOOL_CONTEXT_DIR", str(tmp_path / "contexts"))
    path = save_context(SiteContext(cluster="lab"))
    path.write_text('{"cluster": "lab", "env": ' + "[" * 30_000 + "]" * 30_000 + "}")  # < 64 KB
    os.chmod(path, 0o600)
    args = ["versions", "--spec", str(LAB), "--nodes", "gpu001"]
    _one_line_exit_2(args, capsys, "lab.json", "nested too deeply")


def test_a_deep_node_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node_file = tmp_path / "node.json"
    node_file.write_text('{"version": 1, "node": ' + DEEP + "}")
    _one_line_exit_2(["node-check", "--node-file", str(node_file)], capsys, "nested too deeply")


# --- the fuzz -----------------------------------------------------------------------------------

# What a hostile or broken file puts where a value goes.
_HOSTILE = st.sampled_from(
    [DEEP, "1e400", "-1e400", "9" * 5000, '"\\ud800"', "NaN", "Infinity", "null", "[]", "{}"]
)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def _json_mutated(draw: st.DrawFn, text: str) -> str:
    """The file with one value replaced by a hostile token or a JSON value of another shape,
    or its text garbled as captures are."""
    choice = draw(st.integers(0, 2))
    if choice == 0:
        return draw(mutated(text))
    data = json.loads(text)
    path: list[Any] = []
    node: Any = data
    while isinstance(node, dict | list) and node and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node))))
        path.append(key)
        node = node[key]
    marker = "\x00MARK\x00"
    if not path:
        return draw(_HOSTILE) if choice == 1 else json.dumps(draw(_JSON))
    holder: Any = data
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = marker
    replacement = draw(_HOSTILE) if choice == 1 else json.dumps(draw(_JSON))
    return json.dumps(data).replace(json.dumps(marker), replacement)


_FUZZ = settings(
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _no_crash(code: int, err: str, allowed: set[int]) -> None:
    assert "internal error" not in err and "Traceback" not in err, err
    assert code in allowed, (code, err)
    if code == 2:
        assert len(err.strip().splitlines()) >= 1


@_FUZZ
@given(data=st.data())
def test_a_mutated_spec_is_read_or_refused_with_exit_2(
    data: st.DataObject, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = data.draw(mutated(LAB_TEXT))
    spec = tmp_path / "c.yml"
    spec.write_bytes(text.encode("utf-8", "surrogatepass"))
    code = main(["spec", "check", str(spec)])
    _no_crash(code, capsys.readouterr().err, {0, 2})


@pytest.fixture(scope="module")
def finished_record(tmp_path_factory: pytest.TempPathFactory) -> RunRecord:
    return _finished(tmp_path_factory.mktemp("record"))


@_FUZZ
@given(data=st.data())
def test_a_mutated_run_record_is_reported_or_refused_with_exit_2(
    data: st.DataObject, finished_record: RunRecord, capsys: pytest.CaptureFixture[str]
) -> None:
    name = data.draw(st.sampled_from(["summary.json", "findings.json"]))
    path = finished_record.path / name
    original = path.read_text()
    try:
        path.write_bytes(data.draw(_json_mutated(original)).encode("utf-8", "surrogatepass"))
        code = main(["report", str(finished_record.path)])
        _no_crash(code, capsys.readouterr().err, {0, 1, 2})
    finally:
        path.write_text(original)


@_FUZZ
@given(data=st.data())
def test_a_mutated_capture_is_read_or_refused_with_exit_2(
    data: st.DataObject,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = _capture(tmp_path_factory.mktemp("capture"))
    name = data.draw(
        st.sampled_from(["manifest.json", "gpu001/probes.json", "gpu001/versions.out"])
    )
    path = folder / name
    if name.endswith(".out"):
        path.write_text(data.draw(mutated(path.read_text())))
    else:
        path.write_bytes(
            data.draw(_json_mutated(path.read_text())).encode("utf-8", "surrogatepass")
        )
    code = main(["versions", "--spec", str(LAB), "--from", str(folder)])
    _no_crash(code, capsys.readouterr().err, {0, 1, 2, 3})


@_FUZZ
@given(data=st.data())
def test_a_mutated_context_is_read_or_refused(
    data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("contexts")
    os.environ["CLUSTER_TOOL_CONTEXT_DIR"] = str(folder)
    try:
        context = SiteContext(cluster="lab", inventory="/x", env={"LAB_BMC_PASSWORD": "pw"})
        path = save_context(context)
        path.write_bytes(
            data.draw(_json_mutated(path.read_text())).encode("utf-8", "surrogatepass")
        )
        os.chmod(path, 0o600)
        try:
            load_context("lab")
        except UsageError as exc:
            assert "\n" not in str(exc).strip()
    finally:
        os.environ["CLUSTER_TOOL_CONTEXT_DIR"] = str(folder.parent)


@_FUZZ
@given(data=st.data())
def test_a_mutated_node_file_is_read_or_refused(
    data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    node_file = tmp_path_factory.mktemp("node") / "node.json"
    text = json.dumps(expectations_for(load_spec(LAB), "gpu001").to_node_file())
    node_file.write_bytes(data.draw(_json_mutated(text)).encode("utf-8", "surrogatepass"))
    try:
        read_node_file(node_file)
    except UsageError as exc:
        assert "\n" not in str(exc).strip()


@pytest.mark.parametrize(
    "storage", ["0", ["0"], [{"role": "scratch", "path": "/s", "fstypes": "xfs"}]]
)
def test_a_node_file_whose_storage_is_not_mounts_is_refused(
    storage: object, tmp_path: Path
) -> None:
    # Found by the fuzz above: `"storage": "0"` reached ExpectedMount.from_json as a str
    # ('str' object has no attribute 'get': an internal error, exit 1).
    data = expectations_for(load_spec(LAB), "gpu001").to_node_file()
    data["storage"] = storage
    node_file = tmp_path / "node.json"
    node_file.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="not a valid node file: a storage entry is not a mount"):
        read_node_file(node_file)
