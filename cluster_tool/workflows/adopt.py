"""`cluster-tool adopt`: a spec draft from a running cluster's fabric (`ibnetdiscover` text)
and its GPU nodes' profile, with every departure from the rail-optimized rule listed.

The draft is validated as `spec check` validates a spec before it is returned, and its
departures are computed from the draft's own cabling plan, as `fabric check` computes them.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

import yaml
from ClusterShell.NodeSet import NodeSet

from cluster_tool.errors import ParseError, SpecError, UsageError
from cluster_tool.fabric.adopt import Adopted, adopt_fabric
from cluster_tool.fabric.departures import departures
from cluster_tool.fabric.plan import plan_for
from cluster_tool.findings import Finding
from cluster_tool.parsers.ibnetdiscover import parse_ibnetdiscover
from cluster_tool.render import guards
from cluster_tool.spec.loader import load_spec_text
from cluster_tool.spec.models import DEFAULT_SWITCH_NAME_PATTERN, Cluster, NodeProfile
from cluster_tool.spec.profiles import BUILTIN_PROFILES

# ibnetdiscover of a 1,024-node x 8-rail fabric is ~84,000 lines, ~7 MB; four times that
# is room for dual-port HCAs, storage nodes and long names, and still bounds the parse.
MAX_FABRIC_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class AdoptResult:
    """The draft's text, the cluster it loads as, its departures and what was left out."""

    text: str
    cluster: Cluster
    adopted: Adopted
    departures: list[Finding]


def read_fabric_text(data: bytes, source: str) -> str:
    """The capture as text; UsageError on one too large or not text at all."""
    if len(data) > MAX_FABRIC_BYTES:
        raise UsageError(f"{source}: {len(data)} bytes, over the {MAX_FABRIC_BYTES}-byte limit")
    if b"\x00" in data:
        raise UsageError(f"{source}: not ibnetdiscover text (a NUL byte)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{source}: not ibnetdiscover text (not UTF-8 at byte {exc.start})"
        ) from None


def adopt(
    fabric_text: str,
    *,
    source: str,
    name: str,
    profile_name: str,
    profile: NodeProfile,
    profile_body: dict[str, Any] | None,
    network: str,
    leaf_name_pattern: str | None = None,
) -> AdoptResult:
    """A spec draft for the cluster `fabric_text` shows; UsageError/SpecError when it cannot."""
    try:
        fabric = parse_ibnetdiscover(fabric_text)
    except ParseError as exc:
        raise UsageError(f"{source}: not ibnetdiscover text: {exc}") from None
    if not fabric.nodes:
        raise UsageError(f"{source}: not ibnetdiscover text (no switch or CA record)")
    adopted = adopt_fabric(
        fabric,
        profile,
        switch_name=re.compile(DEFAULT_SWITCH_NAME_PATTERN),
        leaf_name_pattern=leaf_name_pattern,
    )
    data = _draft(name, profile_name, profile, profile_body, adopted, network)
    body = yaml.safe_dump(data, sort_keys=False, width=100, default_flow_style=None)
    try:
        cluster = load_spec_text(body, f"<adopted from {source}>")
    except SpecError as exc:
        raise UsageError(f"the draft is not a valid spec: {str(exc).splitlines()[0]}") from None
    found = departures(plan_for(cluster), cluster)
    return AdoptResult(_header(source, adopted, found) + body, cluster, adopted, found)


def _draft(
    name: str,
    profile_name: str,
    profile: NodeProfile,
    profile_body: dict[str, Any] | None,
    adopted: Adopted,
    network: str,
) -> dict[str, Any]:
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,62}", name):
        raise UsageError(f"--name {name!r}: lower-case letters, digits and `-`, a letter first")
    try:
        net = ipaddress.IPv4Network(network)
    except ValueError as exc:
        raise UsageError(f"--network: {exc}") from None
    nodes = list(adopted.placement)
    head = net.network_address + 10
    first_gpu = net.network_address + (257 if net.prefixlen <= 22 else 11)
    if int(first_gpu) + len(nodes) >= int(net.broadcast_address):
        raise UsageError(f"--network {net}: too small for {len(nodes)} GPU nodes from {first_gpu}")
    rails = len(profile.hcas)
    data: dict[str, Any] = {
        "apiVersion": "cluster-tool/v1",
        "kind": "Cluster",
        "name": name,
    }
    if profile_body is not None:
        data["profiles"] = {profile_name: profile_body}
    data["management"] = {"network": str(net), "interface": "eno1"}
    data["bmc"] = {
        "address_pattern": "{name}-bmc",
        "credentials": {
            "username": {"env": "CLUSTER_BMC_USERNAME"},
            "password": {"vault": "vault_bmc_password"},
        },
    }
    data["nodes"] = [
        {"hosts": "head01", "address": str(head)},
        {"hosts": str(NodeSet.fromlist(nodes)), "profile": profile_name, "address": str(first_gpu)},
    ]
    fabric: dict[str, Any] = {
        "rails": rails,
        "su_size": adopted.su_size,
        "leaf_ports": adopted.leaf_ports,
        "spine_ports": adopted.spine_ports,
        "subnet_manager": "head01",
        "expected_speed": profile.expected_speed,
        "expected_width": profile.expected_width,
        "expected_rate_gbps": profile.expected_rate_gbps,
    }
    fabric.update(adopted.spec_fabric())
    if not adopted.spines:  # leaves alone (no spine yet): the placement says there is none
        fabric.pop("spine_switches")
        fabric["spines"] = 1
    data["fabric"] = fabric
    data["slurm"] = {
        "controller": "head01",
        "accounting_host": "head01",
        "partitions": [{"name": "gpu", "default": True}],
    }
    return data


def _header(source: str, adopted: Adopted, found: list[Finding]) -> str:
    lines = [
        "---",
        f"# Spec draft written by `cluster-tool adopt` from {source}.",
        "# The fabric is as discovered: leaves and spines by their own names and GUIDs, each",
        "# GPU node's placement, the HCAs cabled elsewhere (`cables`), the uplinks as they run.",
        "# Placeholders to edit: management network and addresses, head01, the BMC pattern.",
        f"# Departures from the rail-optimized rule ({len(found)}; `fabric check` warns of each):",
    ]
    lines += [f"#   {f.message}" for f in found[:200]]
    if len(found) > 200:
        lines.append(f"#   ... and {len(found) - 200} more (`adopt --json` lists all)")
    if adopted.not_adopted:
        lines.append(f"# Left out ({len(adopted.not_adopted)}): not a compute HCA of the profile:")
        lines += [f"#   {why}" for why in adopted.not_adopted[:20]]
        if len(adopted.not_adopted) > 20:
            lines.append(
                f"#   ... and {len(adopted.not_adopted) - 20} more (`adopt --json` lists all)"
            )
    # Fabric names are data: each comment line must stay one comment line.
    return "".join(guards.check("comment", line, "adopt header") + "\n" for line in lines)


def profile_for(name: str) -> tuple[str, NodeProfile, dict[str, Any] | None]:
    """A built-in profile by name, or a profile file as `profile discover --out` writes
    (its name, the model, and the body the draft defines it with)."""
    from pathlib import Path

    from pydantic import ValidationError

    from cluster_tool.fileio import read_input_text
    from cluster_tool.spec.loader import parse_yaml
    from cluster_tool.spec.models import builtin_profile

    path = Path(name)
    if path.suffix not in (".yml", ".yaml"):
        try:
            return name, builtin_profile(name), None
        except KeyError:
            raise UsageError(
                f"--profile {name!r}: not a built-in profile ({', '.join(BUILTIN_PROFILES)}) "
                "nor a profile file (.yml, as `profile discover --out` writes)"
            ) from None
    data, _ = parse_yaml(read_input_text(path), str(path))
    if not isinstance(data, dict) or len(data) != 1:
        raise UsageError(f"{path}: expected one profile (NAME: {{keys}}), as --out writes")
    ((profile_name, body),) = data.items()
    if isinstance(body, dict) and body.get("extends") in BUILTIN_PROFILES:
        # `extends` a built-in, as a spec's profiles may: the draft carries it as written.
        body = {**BUILTIN_PROFILES[body["extends"]], **body}
        body.pop("extends")
    if not isinstance(profile_name, str) or not re.fullmatch(
        r"[a-z0-9][a-z0-9._-]{0,63}", profile_name
    ):
        raise UsageError(f"{path}: the profile's name is not a profile name (a-z, 0-9, ._-)")
    try:
        return profile_name, NodeProfile.model_validate(body), body
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"{path}: {where}: {first['msg']}") from None
