"""`cluster-tool profile discover`: a node profile read from a node's capture."""

from pathlib import Path
from typing import Annotated, Any

import typer

from cluster_tool import output
from cluster_tool.commands._shape import SpecOptionCommand
from cluster_tool.errors import EXIT_CHECKS_FAILED, UsageError

profile_app = typer.Typer(
    help="Make node profiles from the hardware and hold nodes to them.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _profile_to_diff(name: str, spec: Path | None) -> Any:
    """A profile by name: the spec's (with `--spec`) or a built-in one; or a YAML file as
    `--out` writes it (one profile name mapping to its keys)."""
    from pydantic import ValidationError

    from cluster_tool.spec.models import NodeProfile, builtin_profile

    path = Path(name)
    if spec is None and path.suffix in (".yml", ".yaml"):
        from cluster_tool.fileio import read_input_text
        from cluster_tool.spec.loader import parse_yaml

        # The spec's hardened reader: bounded, every character checked, a syntax error exit 2.
        data, _ = parse_yaml(read_input_text(path), str(path))
        if not isinstance(data, dict) or len(data) != 1:
            raise UsageError(f"{path}: expected one profile (NAME: {{keys}}), as --out writes")
        ((_, body),) = data.items()
        try:
            return NodeProfile.model_validate(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise UsageError(f"{path}: {where}: {first['msg']}") from None
    if spec is not None:
        from cluster_tool.spec import load_spec

        cluster = load_spec(spec)
        if name not in cluster.profile_names():
            raise UsageError(f"{spec}: no profile {name!r}; one of {cluster.profile_names()}")
        return cluster.profile(name)
    try:
        return builtin_profile(name)
    except KeyError:
        raise UsageError(f"no built-in profile {name!r} (a spec's: add --spec SPEC)") from None


@profile_app.command("discover", cls=SpecOptionCommand)
def discover_command(
    capture: Annotated[
        Path | None,
        typer.Option(
            "--from", help="A saved capture (`validate --save DIR`); without it, over SSH."
        ),
    ] = None,
    node: Annotated[
        str | None,
        typer.Option("--node", help="The node (with --from: default the capture's only one)."),
    ] = None,
    pair: Annotated[
        list[str] | None,
        typer.Option(
            "--pair",
            help="GPUn=DEVICE (or GPUn=none): the compute HCA of a GPU the topology leaves "
            "ambiguous. Repeatable.",
        ),
    ] = None,
    reserve: Annotated[
        float,
        typer.Option(
            "--memory-reserve-pct",
            min=0.0,
            max=50.0,
            help="Share of MemTotal left out of Slurm's RealMemory.",
        ),
    ] = 2.0,
    name: Annotated[str, typer.Option("--name", help="Profile name for --out.")] = "discovered",
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the profile (YAML) here, mode 0600.")
    ] = None,
    diff: Annotated[
        str | None,
        typer.Option(
            "--diff",
            help="Compare the node with this profile (built-in name, a --spec profile, or a "
            "YAML file --out wrote); exit 1 on a mismatch.",
        ),
    ] = None,
    spec: Annotated[
        Path | None,
        typer.Option(
            "--spec", help="The cluster spec: how to reach --node live, and --diff's profiles."
        ),
    ] = None,
    ssh_config: Annotated[
        Path | None,
        typer.Option("--ssh-config", help="OpenSSH config naming the hosts (live)."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine output on stdout.")] = False,
) -> int:
    """Read a node's GPUs, compute HCAs (each paired with the GPU on its PCIe switch: its rail),
    other NICs, CPUs and memory from a capture, and print the profile they make.

    Where the topology pairs a GPU with more than one HCA (or one HCA with several GPUs),
    nothing is guessed: the discovery says so, and --pair decides. Values the capture does
    not hold are listed as not read; --out refuses to write a profile missing any of them.
    """
    from cluster_tool.parsers import to_jsonable
    from cluster_tool.workflows.discover import (
        diff_node,
        discover_from_capture,
        parse_pairs,
    )

    pairs = parse_pairs(pair or [])
    if capture is not None:
        found, facts = discover_from_capture(capture, node, pairs=pairs, memory_reserve_pct=reserve)
    else:
        found, facts = _discover_live(spec, node, ssh_config, pairs, reserve)
    mismatches = []
    if diff is not None:
        mismatches = diff_node(_profile_to_diff(diff, spec), facts, found)
    profile = None
    if out is not None or not (found.ambiguous or found.unpaired):
        try:
            profile = found.profile()
        except UsageError:
            if out is not None:
                raise
    if out is not None and profile is not None:
        import yaml

        from cluster_tool.fileio import atomic_write

        atomic_write(out, yaml.safe_dump({name: profile}, sort_keys=False))
    record = {
        "discovery": to_jsonable(found),
        "profile": profile,
        "mismatches": [f.model_dump() for f in mismatches],
    }
    if json_out:
        output.emit_json(record)
    else:
        _print(found, profile, mismatches)
    return EXIT_CHECKS_FAILED if any(f.fails for f in mismatches) else 0


def _discover_live(
    spec: Path | None,
    node: str | None,
    ssh_config: Path | None,
    pairs: dict[int, str | None],
    reserve: float,
) -> Any:
    """Over SSH, as validate reaches the node: the cluster's context, its recorded host keys."""
    if spec is None or node is None:
        raise UsageError("give --from CAPTURE, or --spec SPEC and --node NODE to read it live")
    from cluster_tool.commands._context import reach_cluster
    from cluster_tool.remote.fanout import transport_named
    from cluster_tool.remote.known_hosts import KnownHosts
    from cluster_tool.spec import load_spec
    from cluster_tool.workflows.discover import discover_live

    cluster = load_spec(spec)
    address = {h.name: h.address for h in cluster.hosts()}
    if node not in address:
        raise UsageError(f"{spec}: no host {node!r}")
    reached = reach_cluster(cluster, ssh_config=ssh_config)
    transport = transport_named(
        "paramiko", reached.ssh_config, KnownHosts.for_cluster(cluster.name)
    )
    return discover_live(node, address[node], transport, pairs=pairs, memory_reserve_pct=reserve)


def _print(found: Any, profile: Any, mismatches: list[Any]) -> None:
    out = output.stdout
    out.print(f"{found.node}: {found.system or 'system not read'}")
    for g in found.gpus:
        out.print(f"  GPU{g.index}  {g.pci}  {g.product}")
    for h in found.hcas:
        rate = f"{h.rate_gbps:g} Gb/s" if h.rate_gbps else "rate not read"
        out.print(
            f"  rail {h.rail}: {h.device} ({h.pci or 'PCI not read'}) {h.distance} from "
            f"GPU{h.gpu}, {h.link_layer or 'link layer not read'}, {rate}"
        )
    for n in found.nics:
        out.print(f"  not compute: {n.device} ({n.pci or 'PCI not read'}): {n.affinity}; {n.why}")
    for n in found.unpaired:
        out.print(f"  not paired: {n.device}: {n.why}")
    for a in found.ambiguous:
        out.print(f"  ambiguous: {a.message}")
    for u in found.unread:
        out.print(f"  not read: {u}")
    if found.cpu:
        c = found.cpu
        out.print(f"  CPUs: {c.sockets} x {c.cores_per_socket} cores x {c.threads_per_core}")
    if found.mem_total_mib is not None:
        out.print(
            f"  memory: MemTotal {found.mem_total_mib} MiB, RealMemory "
            f"{found.slurm_real_memory_mib} MiB ({found.memory_reserve_pct:g}% reserve)"
        )
    if profile is None:
        out.print("  no profile: see `ambiguous` / `not read` above")
    for f in mismatches:
        out.print(f"  {f.check}: {f.message}")


def register(app: typer.Typer) -> None:
    """Add `profile` to the root app."""
    app.add_typer(profile_app, name="profile")
