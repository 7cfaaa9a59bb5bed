"""`cluster-tool adopt`: a spec draft from a running cluster's fabric and its nodes' profile."""

from pathlib import Path
from typing import Annotated

import typer

from cluster_tool import output
from cluster_tool.errors import UsageError


def adopt_command(
    fabric: Annotated[
        Path, typer.Argument(help="The fabric as `ibnetdiscover` prints it (a saved capture).")
    ],
    profile: Annotated[
        str,
        typer.Option(
            "--profile",
            "-p",
            help="The GPU nodes' profile: a built-in name, or a file `profile discover --out` "
            "wrote from one node's capture.",
        ),
    ],
    name: Annotated[str, typer.Option("--name", help="Cluster name.")] = "adopted",
    network: Annotated[
        str, typer.Option("--network", help="Management network (CIDR) to number hosts in.")
    ] = "10.10.0.0/16",
    leaf_name_pattern: Annotated[
        str | None,
        typer.Option(
            "--leaf-name-pattern",
            help="Read each leaf's SU and rail from its name (`su{su:02d}-leaf-r{rail1}`); "
            "without it they are read from the cabling.",
        ),
    ] = None,
    out: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write the draft; '-' for stdout.")
    ] = Path("cluster.yml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Machine output on stdout.")] = False,
) -> int:
    """Write a spec draft for the cluster a fabric shows: leaves and spines by their names and
    GUIDs, each GPU node's SU and port, the cabling as it is, and every departure from the
    rail-optimized rule (listed here and in the draft; `fabric check` warns of each)."""
    from cluster_tool.fileio import atomic_write, read_input_bytes
    from cluster_tool.workflows.adopt import (
        MAX_FABRIC_BYTES,
        adopt,
        profile_for,
        read_fabric_text,
    )

    if str(out) != "-" and out.exists() and not force:
        raise UsageError(f"{out}: exists; use --force to overwrite")
    text = read_fabric_text(read_input_bytes(fabric, MAX_FABRIC_BYTES), str(fabric))
    profile_name, model, body = profile_for(profile)
    result = adopt(
        text,
        source=str(fabric),
        name=name,
        profile_name=profile_name,
        profile=model,
        profile_body=body,
        network=network,
        leaf_name_pattern=leaf_name_pattern,
    )
    a = result.adopted
    if str(out) == "-":
        output.stdout.print(result.text, end="")
    else:
        atomic_write(out, result.text)
    if json_out:
        output.emit_json(
            {
                "written": None if str(out) == "-" else str(out),
                "gpu_nodes": len(a.placement),
                "leaves": len(a.leaves),
                "spines": len(a.spines),
                "sus": result.cluster.su_count,
                "cables_elsewhere": len(a.cables),
                "uplinks": len(a.uplinks),
                "departures": [f.model_dump() for f in result.departures],
                "not_adopted": a.not_adopted,
            }
        )
        return 0
    say = output.stderr if str(out) == "-" else output.stdout
    say.print(
        f"adopted {len(a.placement)} GPU nodes in {result.cluster.su_count} SUs, "
        f"{len(a.leaves)} leaves, {len(a.spines)} spines, {len(a.uplinks)} uplinks"
    )
    for f in result.departures[:50]:
        say.print(f"  departure: {f.message}")
    if len(result.departures) > 50:
        say.print(f"  ... {len(result.departures) - 50} more departures (--json lists all)")
    if a.not_adopted:
        say.print(f"  left out: {len(a.not_adopted)} CA ports (see the draft's header)")
    if str(out) != "-":
        say.print(f"wrote {out}; next: cluster-tool spec check {out}")
    return 0


def register(app: typer.Typer) -> None:
    """Add `adopt` to the root app."""
    app.command("adopt")(adopt_command)
