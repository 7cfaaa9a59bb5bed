"""`cluster-tool spec check|schema`, `cluster-tool init` and `cluster-tool render`."""

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cluster_tool import output
from cluster_tool.commands._shape import SpecArgumentCommand
from cluster_tool.errors import EXIT_USAGE, SpecError, UsageError

# The spec models and the renderer are imported inside the commands that use them, so that
# every other command (and --help) starts without them.
if TYPE_CHECKING:
    from cluster_tool.spec import Cluster

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine output on stdout.")]
SpecFile = Annotated[Path, typer.Argument(help="The cluster spec (YAML).")]

spec_app = typer.Typer(
    help="Check a cluster spec or print its JSON schema.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def summary(cluster: "Cluster") -> dict[str, object]:
    """What a valid spec describes, in numbers an SRE checks first."""
    from cluster_tool.fabric.plan import leaves, spines

    gpus = cluster.gpu_nodes()
    return {
        "cluster": cluster.name,
        "hosts": len(cluster.hosts()),
        "gpu_nodes": len(gpus),
        "gpus": sum(n.profile.gpu_count for n in gpus if n.profile),
        "profiles": sorted({n.profile_name for n in gpus if n.profile_name}),
        "rails": cluster.fabric.rails,
        "sus": cluster.su_count,
        "leaves": len(leaves(cluster)),
        "spines": len(spines(cluster)),
        "hca_links": len(gpus) * cluster.fabric.rails,
        "slurm_controller": cluster.slurm.controller,
        "subnet_manager": cluster.fabric.subnet_manager,
    }


def _report_problems(exc: SpecError, json_out: bool) -> int:
    if json_out:
        output.emit_json(
            {
                "valid": False,
                "problems": [
                    {
                        "file": p.file,
                        "line": p.line,
                        "column": p.column,
                        "path": p.path,
                        "message": p.message,
                    }
                    for p in exc.problems
                ],
            }
        )
    for problem in exc.problems:
        sys.stderr.write(f"{problem}\n")
    return EXIT_USAGE


@spec_app.command("check", cls=SpecArgumentCommand)
def check(file: SpecFile, json_out: JsonOpt = False) -> int:
    """Validate a spec: exit 0 when valid, else one `FILE:LINE:COL: path: problem` per line, 2."""
    from cluster_tool.spec import load_spec

    try:
        cluster = load_spec(file)
    except SpecError as exc:
        return _report_problems(exc, json_out)
    info = summary(cluster)
    if json_out:
        output.emit_json({"valid": True, "summary": info})
    else:
        output.stdout.print(
            f"{file}: valid: cluster {info['cluster']}, {info['gpu_nodes']} GPU nodes "
            f"({info['gpus']} GPUs) in {info['sus']} SU, {info['rails']} rails, "
            f"{info['leaves']} leaves, {info['spines']} spines"
        )
    return 0


@spec_app.command("schema")
def schema(json_out: JsonOpt = False) -> int:
    """Print the JSON schema of the cluster spec (for editors and CI)."""
    from cluster_tool.spec.schema import spec_schema

    # The schema is JSON either way; --json only keeps the output compact and sorted.
    if json_out:
        output.emit_json(spec_schema())
    else:
        sys.stdout.write(json.dumps(spec_schema(), indent=2) + "\n")
    return 0


def init(
    profile: Annotated[
        str, typer.Option("--profile", "-p", help="Built-in node profile of the GPU nodes.")
    ] = "hgx-h100-8x-ndr",
    hosts: Annotated[
        str, typer.Option("--hosts", help="GPU nodes as a hostlist, e.g. gpu[001-032].")
    ] = "gpu[001-032]",
    name: Annotated[str, typer.Option("--name", help="Cluster name.")] = "mycluster",
    network: Annotated[
        str, typer.Option("--network", help="Management network (CIDR).")
    ] = "10.10.0.0/16",
    out: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write it; '-' for stdout.")
    ] = Path("cluster.yml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    json_out: JsonOpt = False,
) -> int:
    """Write a commented starter spec for a profile and a hostlist (checked before writing)."""
    from cluster_tool.spec.starter import starter_spec

    text = starter_spec(name=name, profile=profile, hosts=hosts, network=network)
    if str(out) == "-":
        sys.stdout.write(text)
        return 0
    if out.exists() and not force:
        raise UsageError(f"{out}: exists; use --force to overwrite")
    from cluster_tool.fileio import atomic_write

    atomic_write(out, text)
    if json_out:
        output.emit_json({"written": str(out), "profile": profile, "hosts": hosts})
    else:
        output.stdout.print(f"wrote {out}; next: cluster-tool spec check {out}")
    return 0


def render_command(
    file: SpecFile,
    out_dir: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Output folder (default inventory/<cluster>)."),
    ] = None,
    diff: Annotated[
        bool, typer.Option("--diff", help="Show what would change; write nothing.")
    ] = False,
    json_out: JsonOpt = False,
) -> int:
    """Render the inventory, cabling plan, Slurm and NCCL files from a spec, atomically."""
    from cluster_tool.render import diff_rendered, render
    from cluster_tool.render.engine import default_out_dir
    from cluster_tool.spec import load_spec

    try:
        cluster = load_spec(file)
    except SpecError as exc:
        return _report_problems(exc, json_out)
    target = out_dir or default_out_dir(cluster)
    if diff:
        result = diff_rendered(cluster, target)
        if json_out:
            output.emit_json({**result.to_json(), "diff": "".join(result.diff)})
        else:
            sys.stdout.write("".join(result.diff))
            if not result.changed:
                output.progress(f"{target}: up to date")
        return 0
    result = render(cluster, target)
    if json_out:
        output.emit_json(result.to_json())
    else:
        output.stdout.print(
            f"rendered {len(result.files)} files into {target} ({len(result.changed)} changed)"
        )
    return 0


def register(app: typer.Typer) -> None:
    """Add `spec`, `init` and `render` to the root app."""
    app.add_typer(spec_app, name="spec")
    app.command("init")(init)
    app.command("render", cls=SpecArgumentCommand)(render_command)
