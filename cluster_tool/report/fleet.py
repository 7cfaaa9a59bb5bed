"""report.html at fleet scale: a rail × node heat map (link state, raw BER, busbw against its
floor), per-rung busbw distributions with the outliers named by node and rail, and the findings
grouped by id. A page of 1,024 nodes × 8 rails stays a few hundred KB: one small cell per
node-rail with its story in a title tooltip, views switched by CSS radio buttons (no script)."""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from cluster_tool.bounds import HostlistError, fold_hostlist
from cluster_tool.gate.localize import MIN_DROP, STRAGGLER_Z, fleet_stats, is_straggler

_SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}
_OK_STATES = frozenset({"up", "ok"})

# A cell's level in each view: good, a warning, bad, no data.
GOOD, WARN, BAD, NONE = 0, 1, 2, 3
# Heat-map rows wrap after this many nodes (a row of 64 tiles fits a laptop screen).
NODES_PER_ROW = 64
# Outliers labelled in a plot; the rest are listed under it.
LABELLED = 8
# Rows of one finding id listed in its <details>; findings.json holds them all.
DETAIL_ROWS = 500

# mlxlink's BER as the link checks write it into `observed` ("raw BER 3e-06").
_BER = re.compile(r"\bBER\s+([0-9.]+(?:[eE][-+]?\d+)?)")

HEAT_CSS = """
.hm-views{font-size:.85rem;margin:.3rem 0} .hm-views label{margin-right:.8rem}
.hm{font-size:.7rem;line-height:1} .hm-row{display:flex;align-items:flex-start;margin:0 0 3px 0}
.hm-lab{width:11rem;flex:none;color:#555;padding-top:2px;overflow:hidden;white-space:nowrap}
.hm-tiles{display:flex;flex-wrap:wrap}
.hm-tile{display:grid;grid-auto-flow:row;gap:1px;margin-right:1px}
.hm-tile i{display:block;width:7px;height:5px;background:#ddd}
.hm-key i{display:inline-block;width:10px;height:10px;margin:0 .2rem 0 .6rem;vertical-align:middle}
.l0{background:#5cb85c!important}.l1{background:#f0ad4e!important}
.l2{background:#d62728!important}.l3{background:#ddd!important}
#hv-k:checked~.hm .k0,#hv-s:checked~.hm .s0,#hv-b:checked~.hm .b0,#hv-w:checked~.hm .w0
{background:#5cb85c}
#hv-k:checked~.hm .k1,#hv-s:checked~.hm .s1,#hv-b:checked~.hm .b1,#hv-w:checked~.hm .w1
{background:#f0ad4e}
#hv-k:checked~.hm .k2,#hv-s:checked~.hm .s2,#hv-b:checked~.hm .b2,#hv-w:checked~.hm .w2
{background:#d62728}
table.groups td{vertical-align:top} details summary{cursor:pointer;color:#1f4f8a}
ul.outliers{font-size:.8rem;margin:.2rem 0 0 1rem;padding:0}
"""


def peak_busbw(points: Sequence[Sequence[float]]) -> float | None:
    """A gate row's busbw: the best over its largest message sizes (the top quarter of the
    sweep, as the gate and the history store read it)."""
    pts = [(float(p[0]), float(p[1])) for p in points if len(p) == 2]
    if not pts:
        return None
    biggest = max(size for size, _ in pts)
    return max(bw for size, bw in pts if size * 4 >= biggest)


def compact_nodes(nodes: Sequence[str]) -> str:
    """Node names as a hostlist (`gpu[0001-1000]`); names NodeSet cannot fold stay a list.
    HostlistTooLarge when the names (from a record made elsewhere) expand past the bound."""
    names = list(dict.fromkeys(nodes))
    try:
        return fold_hostlist(names, "node names")
    except HostlistError:
        return ",".join(names)


@dataclass
class Cell:
    """One node-rail of the heat map and what the run knows of it."""

    node: str
    rail: int
    hca: str = ""
    state: str = "unknown"
    detail: str = ""
    raw_ber: float | None = None
    ber_level: int = NONE
    ber_check: str = ""
    busbw: float | None = None
    floor: float | None = None
    busbw_level: int = NONE
    partners: list[str] = field(default_factory=list)

    @property
    def state_level(self) -> int:
        if self.state in _OK_STATES:
            return GOOD
        return NONE if self.state == "unknown" else BAD

    @property
    def worst(self) -> int:
        known = [lv for lv in (self.state_level, self.ber_level, self.busbw_level) if lv != NONE]
        return max(known) if known else NONE

    def title(self) -> str:
        parts = [f"{self.node} {self.hca} rail {self.rail}: {self.detail or self.state}"]
        ber = f"raw BER {self.raw_ber:.0e}" if self.raw_ber is not None else ""
        parts.append(f"{self.ber_check} {ber}".strip())
        if self.busbw is not None:
            floor = f" (floor {self.floor:g})" if self.floor is not None else ""
            partners = f" with {', '.join(self.partners)}" if self.partners else ""
            parts.append(f"busbw {self.busbw:.1f} GB/s{floor}{partners}")
        return " · ".join(p for p in parts if p)


def _ber_of(finding: Mapping[str, Any]) -> float | None:
    found = _BER.search(str(finding.get("observed") or ""))
    try:
        return float(found.group(1)) if found else None
    except ValueError:
        return None


def _ber_judged(summary: Mapping[str, Any]) -> set[str]:
    """The nodes whose raw BER this run judged (link.ber among their checks, not skipped): a
    node-rail of theirs without a link.ber finding is below the threshold."""
    skipped = summary.get("skipped") or {}
    return {
        str(node)
        for node, ids in (summary.get("checks") or {}).items()
        if "link.ber" in ids and "link.ber" not in (skipped.get(node) or {})
    }


def heat_cells(
    links: Sequence[Mapping[str, Any]],
    findings: Sequence[Mapping[str, Any]],
    busbw: Sequence[Mapping[str, Any]],
    ber_judged: set[str] | frozenset[str] = frozenset(),
) -> dict[tuple[str, int], Cell]:
    """Every node-rail of the link matrix, with the BER the link checks found on its HCA (good
    on the nodes in `ber_judged` where they found nothing) and the worst busbw of its
    rails-rung jobs against their floor."""
    cells: dict[tuple[str, int], Cell] = {}
    rail_of: dict[tuple[str, str], int] = {}
    for link in links:
        node, rail = str(link["node"]), int(link["rail"])
        cell = Cell(node, rail, str(link.get("hca") or ""), str(link.get("state") or "unknown"))
        cell.detail = str(link.get("detail") or "")
        raw = link.get("raw_ber")
        if isinstance(raw, int | float):
            cell.raw_ber, cell.ber_level = float(raw), GOOD
        elif node in ber_judged:
            cell.ber_level = GOOD
        cells[(node, rail)] = cell
        rail_of[(node, cell.hca)] = rail
    for f in findings:
        check = str(f.get("check") or "")
        on_rail = rail_of.get((str(f.get("node")), str(f.get("component"))))
        if check not in ("link.ber", "link.fec") or on_rail is None:
            continue
        hit = cells[(str(f.get("node")), on_rail)]
        if check == "link.ber":
            hit.raw_ber = _ber_of(f)
        level = BAD if check == "link.fec" else WARN
        if hit.ber_level in (NONE, GOOD) or level > hit.ber_level:
            hit.ber_level, hit.ber_check = level, check
    rail_rows = [r for r in busbw if r.get("rail") is not None]
    values = [v for v in (peak_busbw(r.get("points") or []) for r in rail_rows) if v is not None]
    median = statistics.median(values) if values else None
    for row in rail_rows:
        value = peak_busbw(row.get("points") or [])
        if value is None:
            continue
        floor = row.get("floor_gbs")
        nodes = [str(n) for n in row.get("nodes") or []]
        for node in nodes:
            ran = cells.get((node, int(row["rail"])))
            if ran is None or (ran.busbw is not None and ran.busbw <= value):
                continue  # a node-rail that ran several jobs shows its worst
            ran.busbw, ran.floor = value, None if floor is None else float(floor)
            ran.partners = [n for n in nodes if n != node]
            if ran.floor is not None and value < ran.floor:
                ran.busbw_level = BAD
            elif median and value < median * (1 - MIN_DROP):
                ran.busbw_level = WARN
            else:
                ran.busbw_level = GOOD
    return cells


def heat_map_html(summary: Mapping[str, Any], findings: Sequence[Mapping[str, Any]]) -> str:
    """Each node a column of one cell per rail (rail 0 on top), nodes in fabric order wrapped
    in rows of NODES_PER_ROW; a cell's tooltip names node, HCA and rail and what was seen."""
    links: Sequence[Mapping[str, Any]] = summary.get("links") or []
    if not links:
        return ""
    cells = heat_cells(links, findings, summary.get("busbw") or [], _ber_judged(summary))
    nodes = list(dict.fromkeys(str(link["node"]) for link in links))
    rails = sorted({rail for _, rail in cells})
    key = "".join(
        f'<i class="l{lv}"></i>{name}'
        for lv, name in ((GOOD, "good"), (WARN, "warning"), (BAD, "bad"), (NONE, "no data"))
    )
    views = (
        ("k", "worst of the three", True),
        ("s", "link state", False),
        ("b", "raw BER", False),
        ("w", "busbw against its floor", False),
    )
    out = [
        '<div id="heat-map">',
        *(
            f'<input type="radio" name="hv" id="hv-{v}"{" checked" if on else ""}>'
            f'<label for="hv-{v}">{text}</label>'
            for v, text, on in views
        ),
        f'<span class="hm-key">{key}</span>',
        '<div class="hm">',
    ]
    for start in range(0, len(nodes), NODES_PER_ROW):
        row = nodes[start : start + NODES_PER_ROW]
        label = f"{row[0]} … {row[-1]}" if len(row) > 1 else row[0]
        out.append(f'<div class="hm-row"><span class="hm-lab">{escape(label)}</span>')
        out.append('<span class="hm-tiles">')
        for node in row:
            out.append(f'<span class="hm-tile" title="{escape(node)}">')
            for rail in rails:
                cell = cells.get((node, rail))
                if cell is None:
                    out.append(f'<i title="{escape(node)} rail {rail}: not planned"></i>')
                    continue
                css = f"k{cell.worst} s{cell.state_level} b{cell.ber_level} w{cell.busbw_level}"
                out.append(f'<i class="{css}" title="{escape(cell.title())}"></i>')
            out.append("</span>")
        out.append("</span></div>")
    out.append("</div></div>")
    return (
        '<p class="meta">One column of cells per node, rail 0 on top; hover a cell for its '
        "node, HCA, rail and what the run saw.</p>" + "".join(out)
    )


@dataclass(frozen=True)
class RungValue:
    """One gate row's busbw and where it ran."""

    value: float
    label: str
    nodes: tuple[str, ...]
    rail: int | None
    floor: float | None

    @property
    def where(self) -> str:
        rail = f" rail {self.rail}" if self.rail is not None else ""
        return f"{'+'.join(self.nodes) or self.label}{rail}"


def rung_values(busbw: Sequence[Mapping[str, Any]]) -> dict[str, list[RungValue]]:
    by_rung: dict[str, list[RungValue]] = {}
    for row in busbw:
        value = peak_busbw(row.get("points") or [])
        if value is None:
            continue
        floor = row.get("floor_gbs")
        rail = row.get("rail")
        by_rung.setdefault(str(row.get("rung", "?")), []).append(
            RungValue(
                value,
                str(row.get("label", "")),
                tuple(str(n) for n in row.get("nodes") or []),
                None if rail is None else int(rail),
                None if floor is None else float(floor),
            )
        )
    return by_rung


def outliers(values: Sequence[RungValue]) -> list[RungValue]:
    """Below the floor, or a straggler of its rung by the gate's own rule (far below the rung's
    median by robust z-score and by a share of it, with enough samples); worst first."""
    stats = fleet_stats([v.value for v in values])
    out = [
        v
        for v in values
        if (v.floor is not None and v.value < v.floor) or is_straggler(v.value, stats)
    ]
    return sorted(out, key=lambda v: v.value)


def distribution_svg(rung: str, values: Sequence[RungValue], width: int = 620) -> str:
    """A histogram of the rung's busbw, the floor dashed red, the median grey, and the worst
    outliers marked and labelled with node and rail."""
    low = outliers(values)
    numbers = [v.value for v in values]
    floors = sorted({v.floor for v in values if v.floor is not None})
    lo = min(numbers + floors) * 0.95
    hi = max(numbers + floors) * 1.02
    if hi <= lo:
        hi = lo + 1.0
    bins = 40
    counts = [0] * bins
    for number in numbers:
        counts[min(bins - 1, int((number - lo) / (hi - lo) * bins))] += 1
    labelled = low[:LABELLED]
    pad_l, pad_r, pad_t, plot_h = 48, 12, 24, 120
    label_h = 14 * len(labelled)
    height = pad_t + plot_h + 34 + label_h
    plot_w = width - pad_l - pad_r
    bottom = pad_t + plot_h
    top = max(counts) or 1

    def x(bw: float) -> float:
        return round(pad_l + (bw - lo) / (hi - lo) * plot_w, 1)

    title = f"{rung}: busbw of {len(values)} job(s)"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="distribution" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text x="{width // 2}" y="15" text-anchor="middle" font-size="13" '
        f'font-weight="600">{escape(title)}</text>',
        f'<line x1="{pad_l}" y1="{bottom}" x2="{pad_l + plot_w}" y2="{bottom}" stroke="#999"/>',
    ]
    bar_w = plot_w / bins
    for i, count in enumerate(counts):
        if not count:
            continue
        h = max(1.0, count / top * plot_h)
        left = round(pad_l + i * bar_w, 1)
        edge = lo + (hi - lo) * i / bins
        out.append(
            f'<rect x="{left}" y="{round(bottom - h, 1)}" width="{round(bar_w - 1, 1)}" '
            f'height="{round(h, 1)}" fill="#1f77b4"><title>{count} job(s) at '
            f"{edge:.1f}–{edge + (hi - lo) / bins:.1f} GB/s</title></rect>"
        )
    for i in range(6):
        bw = lo + (hi - lo) * i / 5
        out.append(
            f'<text x="{x(bw)}" y="{bottom + 14}" text-anchor="middle" font-size="10">'
            f"{bw:.0f}</text>"
        )
    out.append(
        f'<text x="{pad_l + plot_w // 2}" y="{bottom + 28}" text-anchor="middle" '
        'font-size="11">busbw (GB/s)</text>'
    )
    out.append(
        f'<text x="{pad_l - 6}" y="{pad_t + 10}" text-anchor="end" font-size="10">{top}</text>'
    )
    median = statistics.median(numbers)
    out.append(
        f'<line x1="{x(median)}" y1="{pad_t}" x2="{x(median)}" y2="{bottom}" stroke="#555" '
        f'stroke-dasharray="2 2"><title>median {median:.1f} GB/s</title></line>'
    )
    for floor in floors:
        out.append(
            f'<line class="floor" x1="{x(floor)}" y1="{pad_t}" x2="{x(floor)}" y2="{bottom}" '
            f'stroke="#d62728" stroke-width="1.5" stroke-dasharray="6 4"/>'
            f'<text x="{x(floor) + 3}" y="{pad_t + 10}" font-size="10" fill="#d62728">'
            f"floor {floor:.0f}</text>"
        )
    for i, v in enumerate(labelled):
        ty = bottom + 34 + 14 * i + 10
        out.append(
            f'<circle cx="{x(v.value)}" cy="{bottom - 3}" r="3" fill="#d62728"/>'
            f'<line x1="{x(v.value)}" y1="{bottom}" x2="{x(v.value)}" y2="{ty - 8}" '
            'stroke="#d62728" stroke-width=".6"/>'
            f'<text class="outlier" x="{x(v.value) + 4}" y="{ty}" font-size="10" '
            f'fill="#8a1010">{escape(v.where)}: {v.value:.1f} GB/s</text>'
        )
    out.append("</svg>")
    return "".join(out)


def distributions_html(busbw: Sequence[Mapping[str, Any]], min_jobs: int) -> str:
    """One histogram per rung that ran at least `min_jobs` jobs, with its outliers listed."""
    figures = []
    for rung, values in rung_values(busbw).items():
        if len(values) < min_jobs:
            continue
        low = outliers(values)
        listed = "".join(
            f"<li>{escape(v.where)}: {v.value:.1f} GB/s"
            + (f" (floor {v.floor:g})" if v.floor is not None else "")
            + "</li>"
            for v in low[:50]
        )
        more = f"<li>and {len(low) - 50} more</li>" if len(low) > 50 else ""
        caption = (
            f"{len(low)} outlier(s): below the floor, or {MIN_DROP:.0%} and a robust "
            f"z-score of {STRAGGLER_Z:g} below the rung's median"
        )
        figures.append(
            f'<figure class="rung-distribution" id="dist-{escape(rung)}">'
            f"{distribution_svg(rung, values)}<figcaption>{caption}"
            f'<ul class="outliers">{listed}{more}</ul></figcaption></figure>'
        )
    return '<div class="plots">' + "".join(figures) + "</div>" if figures else ""


def _names(values: Sequence[str], limit: int, fold: bool) -> str:
    """The names folded to a hostlist where that is short, else the first `limit` of them."""
    if fold:
        folded = compact_nodes(values)
        if len(folded) <= 40 * limit:
            return folded
    head = list(values[:limit])
    shown = compact_nodes(head) if fold else ", ".join(head)
    return shown + (f" (+{len(values) - limit} more)" if len(values) > limit else "")


def grouped_findings_html(findings: Sequence[Mapping[str, Any]]) -> str:
    """One row per finding id, worst first: severity, count, the nodes and components it names,
    one message, and every finding of the id behind a <details>."""
    if not findings:
        return "<p>No findings.</p>"
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for f in findings:
        groups.setdefault(str(f.get("check", "")), []).append(f)

    def rank(item: tuple[str, list[Mapping[str, Any]]]) -> tuple[int, str]:
        check, items = item
        return (min(_SEVERITY_RANK.get(str(f.get("severity")), 3) for f in items), check)

    out = [
        '<table id="findings" class="groups"><tr><th>severity</th><th>check</th>'
        "<th>count</th><th>nodes</th><th>components</th><th>findings</th></tr>"
    ]
    for check, items in sorted(groups.items(), key=rank):
        items = sorted(
            items,
            key=lambda f: (
                _SEVERITY_RANK.get(str(f.get("severity")), 3),
                str(f.get("node") or ""),
                str(f.get("component") or ""),
            ),
        )
        sev = str(items[0].get("severity", ""))
        nodes = list(dict.fromkeys(str(f["node"]) for f in items if f.get("node")))
        comps = list(dict.fromkeys(str(f["component"]) for f in items if f.get("component")))
        rows = "".join(
            "<tr>"
            + "".join(
                f"<td>{escape(str(f.get(k))) if f.get(k) is not None else ''}</td>"
                for k in ("severity", "node", "component", "expected", "observed", "message")
            )
            + "</tr>"
            for f in items[:DETAIL_ROWS]
        )
        more = (
            f"<p>{len(items) - DETAIL_ROWS} more in findings.json</p>"
            if len(items) > DETAIL_ROWS
            else ""
        )
        first = escape(str(items[0].get("message", "")))
        details = (
            f"<details><summary>{first}</summary><table><tr><th>severity</th><th>node</th>"
            "<th>component</th><th>expected</th><th>observed</th><th>message</th></tr>"
            f"{rows}</table>{more}</details>"
        )
        out.append(
            f'<tr class="finding-group"><td class="sev-{escape(sev)}">{escape(sev)}</td>'
            f'<td>{escape(check)}</td><td class="count">{len(items)}</td>'
            f"<td>{escape(_names(nodes, 64, fold=True))}</td>"
            f"<td>{escape(_names(comps, 16, fold=False))}</td>"
            f"<td>{details}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)
