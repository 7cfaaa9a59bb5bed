"""The Grafana dashboard in the repository (docs/grafana/cluster-tool-watch.json) asks only for
metrics that exist: the ones cluster_tool.watch.metrics writes (METRICS) and dcgm-exporter's
default fields it names (DCGM_EXPORTER_FIELDS); and it has the panels the operator expects."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from cluster_tool.watch.metrics import DCGM_EXPORTER_FIELDS, METRICS
from tests.conftest import REPO

DASHBOARD = REPO / "docs" / "grafana" / "cluster-tool-watch.json"

FUNCTIONS = {"sum", "min", "max", "avg", "count", "rate", "increase", "time", "topk", "bottomk",
             "label_values", "abs", "clamp_min", "histogram_quantile", "quantile"}  # fmt: skip
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset"}  # fmt: skip


def panels(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for p in items:
        out.append(p)
        out += panels(p.get("panels", []))  # rows hold panels
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names of a PromQL expression: strings, label matchers, grouping labels and
    ranges removed, functions and keywords set aside; a function this test does not know is
    an error (add it to FUNCTIONS once checked)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = m.group(0)
        after = text[m.end() :].lstrip()
        if after.startswith("("):
            assert word in FUNCTIONS, f"unknown PromQL function {word} in {expr}"
        elif word not in KEYWORDS and not word.startswith("__"):
            names.add(word)
    return names


def test_the_name_reader_reads_promql() -> None:
    expr = 'sum by (node, rail) (cluster_tool_watch_port_counter_rate{counter="PortXmitData"})'
    assert metric_names(expr) == {"cluster_tool_watch_port_counter_rate"}
    assert metric_names("a / on (node) b > 0") == {"a", "b"}


def test_every_query_names_only_metrics_that_exist() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    known = set(METRICS) | set(DCGM_EXPORTER_FIELDS)
    exprs = [t["expr"] for p in panels(dashboard["panels"]) for t in p.get("targets", [])]
    # label_values(METRIC, LABEL): the second argument is a label, not a metric
    exprs += [
        re.sub(r",\s*\w+\s*\)$", ")", v["definition"])
        for v in dashboard["templating"]["list"]
        if v.get("definition")
    ]
    used = set().union(*(metric_names(e) for e in exprs))
    assert used - known == set()
    # Every panel asks something; the watcher's per-node gauges are all on it.
    assert all(p.get("targets") for p in panels(dashboard["panels"]) if p["type"] != "row")
    assert used >= set(METRICS)


def test_it_has_the_heat_maps_rates_and_findings_over_time() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    by_title = {p["title"]: p for p in panels(dashboard["panels"])}
    heat = {t for t, p in by_title.items() if p["type"] == "heatmap"}
    assert heat == {"busbw against baseline, rails x nodes", "Raw BER, rails x nodes"}
    busbw = by_title["busbw against baseline, rails x nodes"]["targets"][0]
    assert "rail" in busbw["legendFormat"] and "node" in busbw["legendFormat"]
    assert by_title["Findings over time"]["type"] == "timeseries"
    assert "cluster_tool_watch_findings" in by_title["Findings over time"]["targets"][0]["expr"]
    assert {"PortXmitData per rail", "PortXmitWait per rail"} <= set(by_title)


def test_every_dcgm_field_it_queries_is_in_the_exporters_counters_file() -> None:
    # dcgm-exporter exports only what its counters file names: a panel on a field the role's
    # file leaves out would stay empty on every cluster the roles built.
    role = REPO / "roles" / "dcgm_exporter"
    internal = yaml.safe_load((role / "vars" / "main.yml").read_text(encoding="utf-8"))
    default = yaml.safe_load((role / "defaults" / "main.yml").read_text(encoding="utf-8"))
    lists = re.findall(r"__dcgm_exporter_\w+", default["dcgm_exporter_counters"])
    counters = {c["field"] for name in lists for c in internal[name]}
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in panels(dashboard["panels"]) for t in p.get("targets", [])]
    queried = {m for e in exprs for m in metric_names(e) if m.startswith("DCGM_FI_")}
    assert queried, "the dashboard reads dcgm-exporter's SM clock, utilisation and last Xid"
    assert queried | set(DCGM_EXPORTER_FIELDS) <= counters
