"""`cluster-tool versions`: what every GPU node runs, as a fleet table (component x version x
node count, outliers named), and the findings version.drift / incompatible / outlier."""

from pathlib import Path
from typing import Annotated

import typer

from cluster_tool import output
from cluster_tool.errors import UsageError

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine output on stdout.")]

# How many nodes off a component's most common version the table names.
_NAMED = 3


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
    out = output.stdout
    out.print(f"{'COMPONENT':24} {'VERSION':28} {'NODES':>5}  WHERE", markup=False)
    last = None
    for row in fleet.table:
        # The most common version comes first; the nodes off it are named (a few at most).
        first = row.component != last
        last = row.component
        name = row.component if first else ""
        where = "" if first else ", ".join(row.nodes[:_NAMED])
        if not first and len(row.nodes) > _NAMED:
            where += f" and {len(row.nodes) - _NAMED} more"
        out.print(f"{name:24} {row.version:28} {len(row.nodes):>5}  {where}", markup=False)
    for f in fleet.report.findings:
        out.print(f"{f.severity.upper():7} {f.check:20} {f.message}", markup=False)
    s = fleet.report.summary
    out.print(
        f"{fleet.report.status.upper()}: {s.get('read', 0)} of {s.get('nodes', 0)} nodes read, "
        f"{s.get('errors', 0)} errors, {s.get('warnings', 0)} warnings",
        markup=False,
    )
    return fleet.exit_code


def register(app: typer.Typer) -> None:
    app.command("versions")(versions)
