"""Run reports: findings.json and summary.json of a run rendered to junit.xml and report.html."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cluster_tool.errors import UsageError
from cluster_tool.fileio import PRIVATE_FILE, atomic_write, load_json, read_input_bytes
from cluster_tool.report.html import render_html
from cluster_tool.report.junit import junit_xml

__all__ = ["junit_xml", "load_run", "render_html", "write_rendered", "write_report"]


def load_run(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A run's summary and findings (UsageError when the run has not written them)."""
    loaded: list[Any] = []
    for name in ("summary.json", "findings.json"):
        path = run_dir / name
        if not path.exists():
            raise UsageError(f"{run_dir}: no {name}; the run did not finish")
        try:
            loaded.append(load_json(read_input_bytes(path), path))
        except UsageError as exc:
            raise UsageError(f"unreadable run record: {exc}") from None
    summary, findings = loaded
    if not isinstance(summary, dict):
        raise UsageError(f"{run_dir / 'summary.json'}: unreadable run record: not a JSON object")
    items = findings.get("findings", []) if isinstance(findings, dict) else []
    if not isinstance(items, list) or not all(isinstance(f, dict) for f in items):
        raise UsageError(f"{run_dir / 'findings.json'}: unreadable run record: bad findings")
    return summary, items


def write_report(run_dir: Path) -> list[Path]:
    """(Re-)write junit.xml and report.html from the run's summary.json and findings.json."""
    summary, findings = load_run(run_dir)
    return write_rendered(run_dir, summary, findings)


def write_rendered(
    run_dir: Path, summary: Mapping[str, Any], findings: Sequence[Mapping[str, Any]]
) -> list[Path]:
    """Write junit.xml and report.html of a run from its summary and findings as written to its
    summary.json and findings.json (a finishing run hands them over; `write_report` reads them)."""
    try:
        rendered = (
            (
                "junit.xml",
                junit_xml(summary, findings, name=f"cluster-tool {summary.get('command', '')}"),
            ),
            ("report.html", render_html(summary, findings)),
        )
    except (AttributeError, TypeError, KeyError, ValueError) as exc:
        # A record from elsewhere (or edited by hand) whose fields are not what the tool writes.
        raise UsageError(f"{run_dir}: unreadable run record: {type(exc).__name__}: {exc}") from None
    # Every file encoded before the first is written: a text no file can hold (a lone
    # surrogate) must not leave junit.xml new and report.html old.
    try:
        encoded = [(name, text.encode("utf-8")) for name, text in rendered]
    except UnicodeEncodeError as exc:
        raise UsageError(f"{run_dir}: unreadable run record: {exc}") from None
    return [atomic_write(run_dir / name, data, mode=PRIVATE_FILE) for name, data in encoded]
