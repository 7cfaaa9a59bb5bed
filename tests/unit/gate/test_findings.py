"""The findings contract every check and the gate hand back (docs/architecture.md, "Findings")."""

from __future__ import annotations

from cluster_tool.findings import Finding, Report


def test_report_fails_on_an_error_and_passes_on_warnings_only() -> None:
    warn = Finding(check="nccl.straggler", severity="warning", node="gpu010", message="slow")
    err = Finding(check="nccl.pair", node="gpu002", message="fails with two partners")
    assert Report.from_findings([warn]).status == "pass"
    report = Report.from_findings([warn, err], {"nodes": 4})
    assert report.status == "fail" and report.exit_code == 1
    assert report.summary == {"errors": 1, "warnings": 1, "info": 0, "nodes": 4}


def test_json_has_every_contract_key_with_null_for_unknown() -> None:
    data = Report.from_findings([Finding(check="nccl.fleet", message="stop")]).to_json()
    assert set(data) == {"status", "findings", "summary"}
    (f,) = data["findings"]
    assert f == {
        "check": "nccl.fleet",
        "severity": "error",
        "node": None,
        "component": None,
        "expected": None,
        "observed": None,
        "message": "stop",
    }
