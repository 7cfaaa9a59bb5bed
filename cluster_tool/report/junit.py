"""JUnit XML from a run record: one test suite per node (and one for the fabric), one test case
per check planned there: failed by its error findings, `<skipped>` with the reason when it did not
run (a check that did not run is never a pass); for CI dashboards."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape as _xml_escape
from xml.sax.saxutils import quoteattr as _xml_quoteattr

from cluster_tool.findings import Report
from cluster_tool.output import escape_controls
from cluster_tool.registry import FABRIC_CHECKS, NODE_CHECKS, VERSION_CHECKS

FABRIC_SUITE = "fabric"

# Characters XML 1.0 cannot hold at all, even as references: lone surrogates, U+FFFE, U+FFFF.
_NOT_XML = re.compile("[\ud800-\udfff\ufffe\uffff]")


def _text(value: object) -> str:
    """Outside text made fit for XML: control characters (which make the file invalid, or
    drive a terminal that shows it) written out as `\\x1b`, non-characters as `\\ufffe`."""
    shown = escape_controls(str(value))
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", shown)


def escape(value: object) -> str:
    return _xml_escape(_text(value))


def quoteattr(value: object) -> str:
    return _xml_quoteattr(_text(value))


def _suite_of(finding: Mapping[str, Any]) -> str:
    # Fabric findings name a node too, but they belong to the fabric's suite.
    check = str(finding.get("check", ""))
    if check.startswith("fabric."):
        return FABRIC_SUITE
    return str(finding.get("node") or "cluster")


def junit_xml(
    summary: Mapping[str, Any], findings: Sequence[Mapping[str, Any]], name: str = "cluster-tool"
) -> str:
    """`summary["checks"]` maps a suite (node name or `fabric`) to the check ids that ran there;
    a finding whose check is not listed still gets its own case, so nothing is lost."""
    planned: dict[str, list[str]] = {
        str(suite): [str(c) for c in ids] for suite, ids in (summary.get("checks") or {}).items()
    }
    by_case: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for f in findings:
        suite = _suite_of(f)
        check = str(f.get("check", "unknown"))
        by_case.setdefault((suite, check), []).append(f)
        cases = planned.setdefault(suite, [])
        if check not in cases:
            cases.append(check)

    not_run: dict[str, dict[str, str]] = {
        str(suite): {str(c): str(why) for c, why in checks.items()}
        for suite, checks in (summary.get("skipped") or {}).items()
    }

    def failing(suite: str, check: str) -> list[Mapping[str, Any]]:
        return [f for f in by_case.get((suite, check), []) if f.get("severity") == "error"]

    def skipped(suite: str, check: str) -> str | None:
        # A check that did not run is never a pass; one that failed says so even if skipped.
        if failing(suite, check):
            return None
        return not_run.get(suite, {}).get(check)

    total = sum(len(ids) for ids in planned.values())
    failures = sum(1 for s, ids in planned.items() for c in ids if failing(s, c))
    skips = sum(1 for s, ids in planned.items() for c in ids if skipped(s, c) is not None)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>']
    lines.append(
        f'<testsuites name={quoteattr(name)} tests="{total}" failures="{failures}" '
        f'skipped="{skips}">'
    )
    for suite, ids in planned.items():
        failed = sum(1 for c in ids if failing(suite, c))
        skip = sum(1 for c in ids if skipped(suite, c) is not None)
        lines.append(
            f'  <testsuite name={quoteattr(suite)} tests="{len(ids)}" failures="{failed}" '
            f'skipped="{skip}">'
        )
        for check in ids:
            lines.append(f"    <testcase classname={quoteattr(suite)} name={quoteattr(check)}>")
            errors = failing(suite, check)
            why = skipped(suite, check)
            if errors:
                text = "\n".join(str(f.get("message", "")) for f in errors)
                lines.append(
                    f"      <failure message={quoteattr(str(errors[0].get('message', '')))} "
                    f"type={quoteattr(check)}>{escape(text)}</failure>"
                )
            elif why is not None:
                lines.append(f"      <skipped message={quoteattr(why)}/>")
            others = [f for f in by_case.get((suite, check), []) if f.get("severity") != "error"]
            if others:
                text = "\n".join(f"{f.get('severity')}: {f.get('message')}" for f in others)
                lines.append(f"      <system-out>{escape(text)}</system-out>")
            lines.append("    </testcase>")
        lines.append("  </testsuite>")
    lines.append("</testsuites>")
    return "\n".join(lines) + "\n"


def validate_junit(
    report: Report,
    *,
    nodes: Sequence[str],
    fabric_host: str | None,
    skipped: Mapping[str, Mapping[str, str]],
) -> str:
    """JUnit XML of a validate run: a test suite per node checked (when health ran) and one for
    the fabric (when it ran), a test case per check planned there (`NODE_CHECKS` and
    `VERSION_CHECKS`, `FABRIC_CHECKS`), failed by its error findings, `<skipped>` for what did
    not run."""
    checks: dict[str, list[str]] = {}
    if report.summary.get("health"):
        checks.update({node: [*NODE_CHECKS, *VERSION_CHECKS] for node in nodes})
    if fabric_host is not None:
        checks[FABRIC_SUITE] = list(FABRIC_CHECKS)
    findings = [f.model_dump() for f in report.findings]
    return junit_xml({"checks": checks, "skipped": skipped}, findings, name="cluster-tool validate")
