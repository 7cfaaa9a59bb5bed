"""`cluster-tool versions`: what every GPU node runs, as a fleet table (component x version x
node count, outliers named), and the findings version.drift / incompatible / outlier."""

from pathlib import Path
from typing import Annotated

import typer

from cluster_tool import output
from cluster_tool.errors import UsageError

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine output on stdout.")]


def versions(
    spec_arg: Annotated[
        Path | None, typer.Argument(help="The cluster spec.", show_default=False)
    ] = None,
    spec: Annotated[Path | None, typer.Option("--spec", help="The cluster spec.")] = None,
    nodes: Annotated[
        str | None, typer.Option("--nodes", help="Only these GPU nodes (hostlist).")
    ] = None,
    replay: Annotated[
        Path | None,
        typer.Option("--from", help="Read a saved capture (versions or validate --save); no SSH."),
    ] = None,
    save: Annotated[
        Path | None, typer.Option("--save", help="Save every raw output under this folder.")
    ] = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", help="Hosts probed at once.", min=1)
    ] = 32,
    ssh_config: Annotated[
        Path | None, typer.Option("--ssh-config", help="OpenSSH config naming the hosts.")
    ] = None,
    transport: Annotated[
        str, typer.Option("--transport", help="paramiko (default) or openssh.")
    ] = "paramiko",
    json_out: JsonOpt = False,
) -> int:
    """The fleet's versions against the spec and the compatibility matrix. Exit 0 when no error
    finding, 1 otherwise, 3 when a node could not be reached."""
    from cluster_tool.commands._context import load_cluster
    from cluster_tool.nodes import select_gpu_nodes
    from cluster_tool.workflows.versions import collect_versions

    chosen = spec or spec_arg
    if chosen is None:
        raise UsageError("give the cluster spec: --spec FILE")
    if save is not None and replay is not None:
        raise UsageError("--save and --from exclude each other")
    cluster = load_cluster(chosen)
    selected = select_gpu_nodes(cluster, nodes or None)
    reach = None
    if replay is None:
        from cluster_tool.commands._context import reach_cluster
        from cluster_tool.remote.fanout import transport_named
        from cluster_tool.remote.known_hosts import KnownHosts

        ssh_config = reach_cluster(cluster, ssh_config=ssh_config).ssh_config
        reach = transport_named(transport, ssh_config, KnownHosts.for_cluster(cluster.name))

    def progress(result: object) -> None:
        err = getattr(result, "error", None)
        output.progress(
            f"{getattr(result, 'host', '?')}: {'unreachable: ' + err if err else 'read'}"
        )

    fleet = collect_versions(
        cluster,
        nodes=selected,
        transport=reach,
        concurrency=concurrency,
        save=save,
        replay=replay,
        on_done=progress,
    )
    if json_out:
        data = fleet.report.to_json()
        data["versions"] = [row.to_json() for row in fleet.table]
        data["unreachable"] = fleet.unreachable
        output.emit_json(data)
        return fleet.exit_code
    from cluster_tool.checks.fleet_versions import per_node
    from cluster_tool.report.terminal import finding_groups, fold, none_found

    out = output.stdout
    # As `clush -b` shows it: the nodes that run the same, one line and their hostlist; the
    # most common first, so the odd nodes are the lines below it.
    rows = [
        (component, sorted(fold(said), key=lambda g: -g.count))
        for component, said in per_node(fleet.nodes).items()
    ]
    width = max([28, *(len(g.text) for _, groups in rows for g in groups)])
    out.print(f"{'COMPONENT':24} {'VERSION':{width}} {'NODES':>5}  HOSTS", markup=False)
    for component, groups in rows:
        for i, group in enumerate(groups):
            name = component if i == 0 else ""
            out.print(
                f"{name:24} {group.text:{width}} {group.count:>5}  {group.nodes}", markup=False
            )
    for g in finding_groups(fleet.report.findings):
        out.print(output.severity_line(g.severity, f"{g.check:20} {g.folded.line()}"))
    diagnosis = none_found(len(fleet.nodes), len(selected), str(replay or "the SSH answers"))
    if diagnosis and replay is not None:
        output.error_line(diagnosis)
    s = fleet.report.summary
    out.print(
        f"{fleet.report.status.upper()}: {s.get('read', 0)} of {s.get('nodes', 0)} nodes read, "
        f"{s.get('errors', 0)} errors, {s.get('warnings', 0)} warnings",
        markup=False,
    )
    return fleet.exit_code


def register(app: typer.Typer) -> None:
    app.command("versions")(versions)
