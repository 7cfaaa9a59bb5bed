"""`cluster-tool watch`: the running cluster watched every interval (port counter deltas,
new Xid/SXid and link events, GPU health and throttling, stragglers of running jobs), acted on
by the spec's policy (observe, drain, requeue) through Slurm, and shown to Prometheus and in a
JSON event log. docs/watch.md says how to run it."""

from cluster_tool.watch.cycle import Action, CycleResult, run_cycle
from cluster_tool.watch.metrics import METRICS
from cluster_tool.watch.service import watch_forever, watch_once
from cluster_tool.watch.signals import FanoutSources, Sources
from cluster_tool.watch.state import WatchState, load_state, save_state

__all__ = [
    "METRICS",
    "Action",
    "CycleResult",
    "FanoutSources",
    "Sources",
    "WatchState",
    "load_state",
    "run_cycle",
    "save_state",
    "watch_forever",
    "watch_once",
]
