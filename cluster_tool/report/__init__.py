"""Run reports: findings.json and summary.json of a run rendered to junit.xml and report.html."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cluster_tool.errors import UsageError
from cluster_tool.report.html import render_html
from cluster_tool.report.junit import junit_xml

__all__ = ["junit_xml", "load_run", "render_html", "write_report"]


def load_run(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A run's summary and findings (UsageError when the run has not written them)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        findings = json.loads((run_dir / "findings.json").read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise UsageError(
            f"{run_dir}: no {Path(exc.filename).name}; the run did not finish"
        ) from exc
    except ValueError as exc:
        raise UsageError(f"{run_dir}: unreadable run record: {exc}") from exc
    items = findings.get("findings", []) if isinstance(findings, dict) else []
    return summary, items


def write_report(run_dir: Path) -> list[Path]:
    """(Re-)write junit.xml and report.html from the run's summary.json and findings.json."""
    summary, findings = load_run(run_dir)
    written = []
    for name, text in (
        (
            "junit.xml",
            junit_xml(summary, findings, name=f"cluster-tool {summary.get('command', '')}"),
        ),
        ("report.html", render_html(summary, findings)),
    ):
        target = run_dir / name
        tmp = target.with_name(name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target)
        written.append(target)
    return written
