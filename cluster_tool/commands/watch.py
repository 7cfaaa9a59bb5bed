"""`cluster-tool watch`: the running cluster watched every interval and acted on by the spec's
policy; `--once --json` runs one cycle for cron. docs/watch.md."""

import signal
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from cluster_tool import output
from cluster_tool.commands._context import (
    InventoryOpt,
    JsonOpt,
    SlurmViaOpt,
    SshConfigOpt,
    progress,
    reach_cluster,
)
from cluster_tool.errors import UsageError

if TYPE_CHECKING:
    from cluster_tool.watch.cycle import CycleResult

POLICIES = ("observe", "drain", "requeue")


def _show(result: "CycleResult", json_out: bool) -> None:
    if json_out:
        output.emit_json(result.to_json())
        return
    out = output.stdout
    for f in result.new:
        where = " ".join(p for p in (f.node, f.component) if p)
        out.print(f"{f.severity.upper():7} {f.check:20} {where}: {f.message}", markup=False)
    for a in result.actions:
        what = f"job {a.job_id}" if a.job_id is not None else a.node
        out.print(f"{a.kind.upper():7} {what}: {a.detail}", markup=False)
    s = result.to_json()["summary"]
    out.print(
        f"{'FAIL' if result.exit_code else 'PASS'}: {s['errors']} errors, {s['warnings']} "
        f"warnings, {len(result.new)} new, {len(result.actions)} actions, "
        f"{s['drained_by_watch']} drained by watch (policy {result.policy})",
        markup=False,
    )


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # SIGTERM (systemd stop) ends the loop as Ctrl-C does: exit 130. The state is written
    # atomically at the end of a cycle, so a cycle cut short leaves the last complete one.
    raise KeyboardInterrupt


def watch(
    spec: Annotated[Path, typer.Option("--spec", help="The cluster spec (YAML).")],
    once: Annotated[bool, typer.Option("--once", help="One cycle, then exit (cron).")] = False,
    policy: Annotated[
        str | None,
        typer.Option("--policy", help="observe, drain or requeue for this run (default: spec)."),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option("--state-dir", help="State, event log and textfile (default: spec)."),
    ] = None,
    textfile: Annotated[
        Path | None,
        typer.Option(
            "--textfile",
            help="node_exporter textfile to write (default: STATE_DIR/cluster_tool_watch.prom).",
        ),
    ] = None,
    inventory: InventoryOpt = None,
    ssh_config: SshConfigOpt = None,
    slurm_via: SlurmViaOpt = None,
    transport: Annotated[
        str, typer.Option("--transport", help="openssh (default) or paramiko.")
    ] = "openssh",
    concurrency: Annotated[
        int, typer.Option("--concurrency", help="Hosts probed at once.", min=1)
    ] = 32,
    json_out: JsonOpt = False,
) -> int:
    """Watch the GPU nodes every `watch.interval_s`: port counter deltas, new Xids and link
    flaps, GPU health, stragglers of running jobs; act by policy. Exit 0 when the (last)
    cycle found no error, 1 when it did, 2 on bad input, 130 when stopped."""
    from cluster_tool.commands._context import load_cluster
    from cluster_tool.remote.fanout import transport_named
    from cluster_tool.slurm import connect
    from cluster_tool.watch.service import watch_forever, watch_once
    from cluster_tool.watch.signals import FanoutSources

    if policy is not None and policy not in POLICIES:
        raise UsageError(f"--policy: one of {', '.join(POLICIES)}, not {policy!r}")
    cluster = load_cluster(spec)
    settings = cluster.watch
    if policy is not None:
        settings = settings.model_copy(update={"policy": policy})
    folder = state_dir or Path(settings.state_dir)
    via = reach_cluster(cluster, inventory, ssh_config, slurm_via)
    # The watcher runs as a service on its host, with that host's SSH setup (no operator's
    # context there: the cluster's known_hosts lives beside the operator's).
    sources = FanoutSources(cluster, transport_named(transport, via.ssh_config), concurrency)
    slurm = connect(via.slurm_via, via.ssh_config)

    prober = None
    if settings.probes:
        from cluster_tool.watch.probes import slurm_prober

        prober = slurm_prober(cluster, settings, slurm)

    def cycle() -> "CycleResult":
        return watch_once(
            cluster, sources, slurm, settings, folder, textfile=textfile, prober=prober
        )

    if once:
        result = cycle()
        _show(result, json_out)
        return result.exit_code

    import threading

    signal.signal(signal.SIGTERM, _interrupt)
    progress(f"watching {len(cluster.gpu_nodes())} GPU nodes every {settings.interval_s} s, "
             f"policy {settings.policy}, state in {folder}")  # fmt: skip
    watch_forever(cycle, settings.interval_s, threading.Event(), lambda r: _show(r, json_out))
    return 0


def register(app: typer.Typer) -> None:
    app.command("watch")(watch)
