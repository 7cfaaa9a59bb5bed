"""report.html: one self-contained, offline page per run — the verdict first, then the rail × node
link state (a table for a few nodes, a heat map of state, BER and busbw for any number), busbw
per rung (against message size for a few jobs, as a distribution with its outliers named for
many; inline SVG generated here), and the findings grouped by id, worst first. No script, no
external asset."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from cluster_tool.report.fleet import (
    HEAT_CSS,
    distributions_html,
    grouped_findings_html,
    heat_map_html,
)

_SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}

# Up to this many nodes the link state is also a table with a column per node; up to this many
# jobs a rung is drawn one line per job; from this many on, as a distribution of busbw.
TABLE_NODES = 32
LINES_PER_RUNG = 16
DISTRIBUTION_JOBS = 8
# The headline names this many nodes of each verdict; the Nodes table has them all.
HEADLINE_NODES = 20

# Link states as the matrix shows them; anything else is drawn as a fault.
_OK_STATES = frozenset({"up", "ok"})
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf")

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5rem;color:#111}
h1{margin:0 0 .3rem 0;font-size:1.4rem} h2{font-size:1.1rem;margin-top:1.6rem}
.verdict{font-size:1.6rem;font-weight:700;padding:.6rem 1rem;border-radius:6px;display:inline-block}
.pass{background:#d9f2dd;color:#0b5d1e} .fail{background:#fbdada;color:#8a1010}
.meta{color:#555;font-size:.9rem;margin:.4rem 0 1rem 0}
table{border-collapse:collapse;font-size:.85rem} td,th{border:1px solid #ccc;padding:.25rem .45rem}
th{background:#f3f3f3;text-align:left}
table.matrix td{text-align:center;min-width:3.2rem}
td.up{background:#d9f2dd} td.fault{background:#f6b3b3;font-weight:600} td.unknown{background:#eee}
td.sev-error{color:#8a1010;font-weight:600} td.sev-warning{color:#8a5a00}
.plots{display:flex;flex-wrap:wrap;gap:1rem} figure{margin:0} figcaption{font-size:.85rem}
"""


def _size_label(size: float) -> str:
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= div:
            value = size / div
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{size:.0f}B"


def findings_worst_first(findings: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Errors before warnings before info; within a severity, by check then node."""
    return sorted(
        findings,
        key=lambda f: (
            _SEVERITY_RANK.get(str(f.get("severity")), 3),
            str(f.get("check", "")),
            str(f.get("node") or ""),
        ),
    )


def link_matrix_html(links: Sequence[Mapping[str, Any]]) -> str:
    """Rows are rails, columns are nodes; a cell is the state of that node's HCA on the rail."""
    if not links:
        return "<p>No link data in this run (the fabric was not checked).</p>"
    nodes = list(dict.fromkeys(str(link["node"]) for link in links))
    rails = sorted({int(link["rail"]) for link in links})
    cell = {(str(link["node"]), int(link["rail"])): link for link in links}
    out = ['<table class="matrix" id="link-matrix"><tr><th>rail \\ node</th>']
    out += [f"<th>{escape(n)}</th>" for n in nodes]
    out.append("</tr>")
    for rail in rails:
        out.append(f"<tr><th>rail {rail}</th>")
        for node in nodes:
            link = cell.get((node, rail))
            if link is None:
                out.append('<td class="unknown">–</td>')
                continue
            state = str(link.get("state") or "unknown")
            css = "up" if state in _OK_STATES else ("unknown" if state == "unknown" else "fault")
            title = f"{node} {link.get('hca', '')} rail {rail}: {link.get('detail') or state}"
            out.append(f'<td class="{css}" title="{escape(title)}">{escape(state)}</td>')
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


def _el(tag: str, text: str | None = None, **attrs: object) -> str:
    """One SVG element; attribute names use `_` for `-` (`font_size` -> `font-size`)."""
    rendered = " ".join(
        f'{k.rstrip("_").replace("_", "-")}="{escape(str(v))}"' for k, v in attrs.items()
    )
    if text is None:
        return f"<{tag} {rendered}/>"
    return f"<{tag} {rendered}>{text}</{tag}>"


def busbw_svg(
    series: Sequence[Mapping[str, Any]], title: str, width: int = 520, height: int = 300
) -> str:
    """busbw (GB/s) against message size (log2 axis), one line per job, the floor dashed red."""
    pad_l, pad_r, pad_t, pad_b = 56, 16, 28, 44
    points = [(float(s), float(b)) for line in series for s, b in line.get("points", []) if s > 0]
    floors = [float(line["floor_gbs"]) for line in series if line.get("floor_gbs") is not None]
    head = f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
    if not points:
        note = _el("text", f"{escape(title)}: no rows", x=8, y=30)
        return f'{head}height="60">{note}</svg>'
    xmin = math.log2(min(p[0] for p in points))
    xmax = math.log2(max(p[0] for p in points))
    if xmax == xmin:
        xmax = xmin + 1
    ymax = max([p[1] for p in points] + floors) * 1.1 or 1.0
    plot_w, plot_h = width - pad_l - pad_r, height - pad_t - pad_b
    bottom = pad_t + plot_h

    def x(size: float) -> float:
        return round(pad_l + (math.log2(size) - xmin) / (xmax - xmin) * plot_w, 1)

    def y(bw: float) -> float:
        return round(pad_t + plot_h - bw / ymax * plot_h, 1)

    out = [
        f'{head}height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(title)}">',
        _el("text", escape(title), x=width // 2, y=16, text_anchor="middle", font_size=13,
            font_weight=600),
        _el("rect", x=pad_l, y=pad_t, width=plot_w, height=plot_h, fill="none", stroke="#999"),
    ]  # fmt: skip
    # x ticks at every fourth power of two, y ticks at five even steps.
    for exp in range(math.ceil(xmin), math.floor(xmax) + 1):
        if exp % 4:
            continue
        px = x(2.0**exp)
        out.append(_el("line", x1=px, y1=bottom, x2=px, y2=bottom + 4, stroke="#666"))
        out.append(
            _el("text", _size_label(2.0**exp), x=px, y=bottom + 16, text_anchor="middle",
                font_size=10)
        )  # fmt: skip
    for i in range(6):
        bw = ymax * i / 5
        py = y(bw)
        out.append(_el("line", x1=pad_l - 4, y1=py, x2=pad_l + plot_w, y2=py, stroke="#eee"))
        out.append(_el("text", f"{bw:.0f}", x=pad_l - 6, y=py + 3, text_anchor="end", font_size=10))
    mid_y = pad_t + plot_h // 2
    out.append(
        _el("text", "message size (bytes)", x=pad_l + plot_w // 2, y=height - 6,
            text_anchor="middle", font_size=11)
    )  # fmt: skip
    out.append(
        _el("text", "busbw (GB/s)", x=12, y=mid_y, font_size=11, text_anchor="middle",
            transform=f"rotate(-90 12 {mid_y})")
    )  # fmt: skip
    for i, line in enumerate(series):
        pts = sorted((float(s), float(b)) for s, b in line.get("points", []) if s > 0)
        if not pts:
            continue
        color = _PALETTE[i % len(_PALETTE)]
        path = " ".join(f"{x(s)},{y(b)}" for s, b in pts)
        label = escape(str(line.get("label", "")))
        out.append(
            _el("polyline", f"<title>{label}</title>", fill="none", stroke=color,
                stroke_width=1.6, points=path)
        )  # fmt: skip
        out.append(_el("text", label, x=pad_l + 6, y=pad_t + 14 + 12 * i, font_size=10, fill=color))
    for floor in sorted(set(floors)):
        py = y(floor)
        out.append(
            _el("line", class_="threshold", x1=pad_l, y1=py, x2=pad_l + plot_w, y2=py,
                stroke="#d62728", stroke_width=1.5, stroke_dasharray="6 4")
        )  # fmt: skip
        out.append(
            _el("text", f"threshold {floor:.0f} GB/s", x=pad_l + plot_w - 4, y=py - 4,
                text_anchor="end", font_size=10, fill="#d62728")
        )  # fmt: skip
    out.append("</svg>")
    return "".join(out)


def _rung_plots(busbw: Sequence[Mapping[str, Any]]) -> str:
    if not busbw:
        return "<p>No NCCL gate ran in this run.</p>"
    by_rung: dict[str, list[Mapping[str, Any]]] = {}
    for line in busbw:
        by_rung.setdefault(str(line.get("rung", "?")), []).append(line)
    figures = []
    for rung, lines in by_rung.items():
        if len(lines) > LINES_PER_RUNG:
            continue  # hundreds of lines read as one blot: the distribution below shows them
        figures.append(
            f'<figure class="rung-plot">{busbw_svg(lines, f"{rung}: busbw vs message size")}'
            f"<figcaption>{len(lines)} job(s); dashed red: the floor a job must reach"
            "</figcaption></figure>"
        )
    lines_html = '<div class="plots">' + "".join(figures) + "</div>" if figures else ""
    return lines_html + distributions_html(busbw, DISTRIBUTION_JOBS)


def _link_state(summary: Mapping[str, Any], findings: Sequence[Mapping[str, Any]]) -> str:
    links = summary.get("links") or []
    nodes = {str(link["node"]) for link in links}
    table = link_matrix_html(links) if len(nodes) <= TABLE_NODES or not links else ""
    return table + heat_map_html(summary, findings)


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], css: Sequence[str] | None = None
) -> str:
    out = ["<table><tr>", *(f"<th>{escape(h)}</th>" for h in headers), "</tr>"]
    for i, row in enumerate(rows):
        cls = f' class="{css[i]}"' if css else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>")
    out.append("</table>")
    return "".join(out)


def render_html(summary: Mapping[str, Any], findings: Sequence[Mapping[str, Any]]) -> str:
    """The whole page from a run's summary.json and findings.json."""
    verdict = str(summary.get("verdict", "fail"))
    errors = sum(1 for f in findings if f.get("severity") == "error")
    warnings = sum(1 for f in findings if f.get("severity") == "warning")
    nodes: Mapping[str, Mapping[str, Any]] = summary.get("nodes") or {}
    # The run's headline is the one cluster_tool.verdicts wrote (the CLI printed the same).
    headline = str(summary.get("headline") or verdict.upper())
    headline += f" · {errors} error(s), {warnings} warning(s)"
    for kind in ("fail", "held", "unknown"):
        named = [n for n, v in nodes.items() if v.get("verdict") == kind]
        if named:
            more = len(named) - HEADLINE_NODES
            rest = f" and {more} more (see Nodes)" if more > 0 else ""
            headline += f"; {kind}: {', '.join(named[:HEADLINE_NODES])}{rest}"
    unproven = summary.get("admitted_unproven") or []
    if unproven:
        headline += f"; admitted unproven (--admit-unproven): {', '.join(map(str, unproven))}"
    inputs = summary.get("inputs") or {}
    meta = " · ".join(
        escape(str(x))
        for x in (
            summary.get("command", ""),
            f"run {summary.get('run_id', '')}",
            f"started {summary['started']}" if summary.get("started") else "",
            f"finished {summary['finished']}" if summary.get("finished") else "",
            *(f"{k}={v}" for k, v in inputs.items() if v not in (None, "", [], False)),
        )
        if x
    )
    phases = summary.get("phases") or []
    phase_rows = [
        [
            str(p.get("name", "")),
            str(p.get("status", "")),
            f"{p.get('elapsed_s', '')}",
            str(p.get("detail") or ""),
        ]
        for p in phases
    ]
    node_rows = [
        [
            n,
            str(v.get("verdict", "")),
            "yes" if v.get("admitted") else "no" if "admitted" in v else "",
            "; ".join(map(str, v.get("unproven") or [])),
            str(v.get("slurm") or ""),
            str(v.get("reason") or ""),
        ]
        for n, v in nodes.items()
    ]
    not_run = [
        [str(suite), str(check), str(why)]
        for suite, checks in (summary.get("skipped") or {}).items()
        for check, why in checks.items()
    ]
    command = escape(str(summary.get("command", "")))
    css = "pass" if verdict == "pass" else "fail"
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>cluster-tool {command} {escape(verdict)}</title>",
            f"<style>{_CSS}{HEAT_CSS}</style></head><body>",
            f"<h1>cluster-tool {command}</h1>",
            f'<div class="verdict {css}" id="verdict">{escape(headline)}</div>',
            f'<div class="meta">{meta}</div>',
            "<h2>Link state, rail × node</h2>",
            _link_state(summary, findings),
            "<h2>Bus bandwidth per rung</h2>",
            _rung_plots(summary.get("busbw") or []),
            "<h2>Findings by id, worst first</h2>",
            grouped_findings_html(findings),
            "<h2>Nodes</h2>",
            _table(["node", "verdict", "admitted", "unproven", "slurm", "reason"], node_rows)
            if node_rows
            else "<p>No nodes.</p>",
            "<h2>Checks not run</h2>",
            _table(["suite", "check", "why"], not_run)
            if not_run
            else "<p>Every planned check ran.</p>",
            "<h2>Phases</h2>",
            _table(["phase", "status", "seconds", "detail"], phase_rows)
            if phase_rows
            else "<p>No phases.</p>",
            "</body></html>",
            "",
        ]
    )
