"""`cluster-tool history NODE`: a node's trend from the history store beside the run records,
read only (the validations write it; see cluster_tool.history)."""

import statistics
from pathlib import Path
from typing import Annotated

import typer

from cluster_tool import output

# How many points of a series the table shows, newest last (--json has them all).
SHOWN_POINTS = 8


def history(
    node: Annotated[str, typer.Argument(help="The node (its name; the store keys its hardware).")],
    runs: Annotated[
        int,
        typer.Option("--runs", min=1, max=1000, help="Its last N runs (default 20, at most 1000)."),
    ] = 20,
    metric: Annotated[
        str | None, typer.Option("--metric", help="Only this metric (busbw_gbs, gpu_temp_c, ...).")
    ] = None,
    runs_dir: Annotated[
        Path | None,
        typer.Option(
            "--runs-dir", help="Where run records go (default $CLUSTER_TOOL_RUNS_DIR or runs/)."
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine output on stdout.")] = False,
) -> int:
    """A node's measurements over its last runs, one line per series (oldest to newest), and
    the hardware identity each run saw. Exit 0, 2 on bad input or no history."""
    from cluster_tool.errors import UsageError
    from cluster_tool.history import METRICS, STORE_NAME, HistoryStore, check_node_name
    from cluster_tool.workflows.runs import default_runs_dir

    check_node_name(node)
    if metric is not None and metric not in METRICS:
        raise UsageError(f"--metric {metric!r}: choose from {', '.join(METRICS)}")
    path = (runs_dir or default_runs_dir()) / STORE_NAME
    with HistoryStore.open(path, read_only=True) as store:
        series = [s for s in store.trend(node, runs) if metric is None or s.metric == metric]
    if not series:
        raise UsageError(f"{node}: no history in {path}")
    identities = list(dict.fromkeys(p.identity for s in series for p in s.points))
    run_ids = {p.run_id for s in series for p in s.points}
    if json_out:
        output.emit_json(
            {
                "node": node,
                "store": str(path),
                "runs": len(run_ids),
                "identities": identities,
                "series": [s.to_json() for s in series],
            }
        )
        return 0
    out = output.stdout
    out.print(
        f"{node}: {len(run_ids)} run(s), hardware identit{'y' if len(identities) == 1 else 'ies'} "
        + ", ".join(identities),
        markup=False,
    )
    out.print(
        f"{'metric':26} {'key':28} {'runs':>4} {'median':>10} {'last':>10}  "
        "trend (oldest → newest)",
        markup=False,
    )
    for s in series:
        values = [p.value for p in s.points]
        median = statistics.median(values)
        changed = "  (new hardware)" if len({p.identity for p in s.points}) > 1 else ""
        shown = " ".join(_fmt(v) for v in values[-SHOWN_POINTS:])
        more = "… " if len(values) > SHOWN_POINTS else ""
        out.print(
            f"{s.metric:26} {output.escape_controls(s.key):28} {len(values):>4} {_fmt(median):>10} "
            f"{_fmt(values[-1]):>10}  {more}{shown}{changed}",
            markup=False,
        )
    return 0


def _fmt(value: float) -> str:
    if value != 0 and (abs(value) < 0.01 or abs(value) >= 1e6):
        return f"{value:.2e}"
    return f"{value:.1f}" if value != int(value) else str(int(value))


def register(app: typer.Typer) -> None:
    app.command("history")(history)
