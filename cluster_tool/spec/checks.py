"""Cross-field rules of the cluster spec: what one field cannot know about another.

Each problem comes with the spec path it belongs to, so the loader can point at the line.
"""

from __future__ import annotations

import ipaddress
import re
import string
from collections import Counter
from typing import Any

from cluster_tool.redact import is_secret_name
from cluster_tool.spec.models import (
    DISTRIBUTION_SLURM,
    LANE_RATE_GBPS,
    OS_TITLES,
    ROLE_CONTROLLER,
    ROLE_GPU,
    ROLE_LOGIN,
    ROLE_SLURMDBD,
    SUPERPOD_SPINES,
    WIDTH_LANES,
    Cluster,
    NodeProfile,
    expand_hostlist,
)
from cluster_tool.spec.pins import spec_problems as compat_problems

Loc = tuple[str | int, ...]
Problem = tuple[Loc, str]


def cross_check(cluster: Cluster) -> list[Problem]:
    """Every cross-field violation in a structurally valid spec (empty when the spec is good)."""
    problems: list[Problem] = []
    problems += _check_profiles(cluster)
    if not all(_fits(g.address, len(expand_hostlist(g.hosts))) for g in cluster.nodes):
        # Past 255.255.255.255 there is no address to derive a host from: every later check
        # reads the hosts, so this one says what is wrong and they wait for a fixed spec.
        return problems + _check_hosts(cluster, derive=False)
    problems += _check_hosts(cluster)
    problems += _check_references(cluster)
    problems += _check_fabric(cluster)
    problems += _check_slurm_and_limits(cluster)
    problems += _check_storage(cluster)
    problems += _check_slurm_source(cluster)
    problems += _check_no_secrets(cluster.ansible_vars, ("ansible_vars",))
    problems += _check_no_secrets(cluster.ansible_connection_vars, ("ansible_connection_vars",))
    problems += _check_ansible_vars(cluster)
    problems += _check_nccl_hcas(cluster)
    # Version pins against the compatibility matrix (docs/compat.md), before any host is touched.
    problems += compat_problems(cluster)
    return problems


def _nccl_selects(value: str, device: str) -> bool:
    """Whether an `NCCL_IB_HCA` list selects `device` (NCCL's syntax: a leading `^` excludes
    the list, a leading `=` matches names exactly, otherwise each entry is a name prefix, so
    `mlx5_1` also selects mlx5_10; `:PORT` after a name picks a port)."""
    exclude = value.startswith("^")
    body = value[1:] if exclude else value
    exact = body.startswith("=")
    body = body[1:] if exact else body
    names = [entry.split(":", 1)[0] for entry in body.split(",") if entry]
    listed = any(device == n if exact else device.startswith(n) for n in names)
    return not listed if exclude else listed


def _check_nccl_hcas(cluster: Cluster) -> list[Problem]:
    """nccl.conf is one file for every GPU node: an NCCL_IB_HCA the spec sets must select each
    GPU profile's compute HCAs, all of them and nothing else. A name the node does not have
    (or a storage port NCCL would stripe over) costs rails silently: NCCL runs on what it
    finds, and the gate then blames the fabric."""
    profiles: list[tuple[str, NodeProfile]] = []
    seen: set[str] = set()
    for group in cluster.nodes:
        if group.profile is None or group.profile in seen:
            continue
        try:
            profile = cluster.profile(group.profile)
        except KeyError:
            continue  # an unknown profile is _check_profiles' to name
        if profile.gpu_count == 0:
            continue
        seen.add(group.profile)
        profiles.append((group.profile, profile))
    if not profiles:
        return []
    value = cluster.nccl.extra_env.get("NCCL_IB_HCA")
    if value is None:
        # Rendered from the profile's compute HCAs (GPU profiles that disagree on them are
        # _check_fabric's to name).
        return []
    problems: list[Problem] = []
    loc = ("nccl", "extra_env", "NCCL_IB_HCA")
    for name, profile in profiles:
        left_out = [h.device for h in profile.compute_hcas if not _nccl_selects(value, h.device)]
        others = [n.device for n in profile.nics if _nccl_selects(value, n.device)]
        if left_out:
            problems.append(
                (
                    loc,
                    f"{value} leaves out compute HCA {', '.join(left_out)} of profile {name}: "
                    f"NCCL would run on {len(profile.hcas) - len(left_out)} of its "
                    f"{len(profile.hcas)} rails",
                )
            )
        if others:
            problems.append(
                (
                    loc,
                    f"{value} selects {', '.join(others)}, which profile {name} has as "
                    "non-compute NICs (storage, in-band): NCCL would stripe over them",
                )
            )
        if not value.startswith("^"):
            exact = value.lstrip("^").startswith("=")
            entries = [e.split(":", 1)[0] for e in value.lstrip("=").split(",") if e]
            known = [h.device for h in profile.hcas] + [n.device for n in profile.nics]
            unknown = [
                e for e in entries if not any(d == e if exact else d.startswith(e) for d in known)
            ]
            if unknown:
                problems.append(
                    (
                        loc,
                        f"{value} names {', '.join(unknown)}, which profile {name} does not "
                        "have (its compute HCAs: "
                        + ", ".join(h.device for h in profile.compute_hcas)
                        + ")",
                    )
                )
    return problems


def _check_ansible_vars(cluster: Cluster) -> list[Problem]:
    """Ansible's own variables decide how, and as whom, every host is reached and what runs
    there (`ansible_ssh_common_args` can carry a ProxyCommand): never by the way, only through
    `ansible_connection_vars`, which says so."""
    problems: list[Problem] = []
    for key in cluster.ansible_vars:
        if key.lower().startswith("ansible_"):
            problems.append(
                (
                    ("ansible_vars", key),
                    f"{key} is one of Ansible's connection, privilege or interpreter "
                    "variables; set it under `ansible_connection_vars` if you mean it",
                )
            )
    for key in cluster.ansible_connection_vars:
        if not key.lower().startswith("ansible_"):
            problems.append(
                (
                    ("ansible_connection_vars", key),
                    f"{key} is not an `ansible_*` variable; put it under `ansible_vars`",
                )
            )
    return problems


def _check_no_secrets(value: Any, loc: Loc) -> list[Problem]:
    """Literal secrets in free-form variables would be rendered into group_vars/all.yml."""
    problems: list[Problem] = []
    if isinstance(value, dict):
        for key, item in value.items():
            sub = (*loc, str(key))
            if (
                is_secret_name(str(key))
                and isinstance(item, str | int | float)
                and "{{" not in str(item)
            ):
                problems.append(
                    (
                        sub,
                        "a literal secret is not allowed in the spec; reference it, e.g. "
                        "'{{ vault_name }}' or \"{{ lookup('env', 'NAME') }}\"",
                    )
                )
            else:
                problems += _check_no_secrets(item, sub)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            problems += _check_no_secrets(item, (*loc, i))
    return problems


def _format_fields(pattern: str) -> set[str] | None:
    try:
        return {f for _, f, _, _ in string.Formatter().parse(pattern) if f is not None}
    except ValueError:
        return None


def _check_profile(profile: NodeProfile, loc: Loc) -> list[Problem]:
    problems: list[Problem] = []
    for i, hca in enumerate(profile.hcas):
        if hca.gpu >= profile.gpu_count:
            message = f"GPU {hca.gpu} does not exist ({profile.gpu_count} GPUs)"
            problems.append(((*loc, "hcas", i, "gpu"), message))
    rails = sorted(h.rail for h in profile.hcas)
    if rails != list(range(len(profile.hcas))):
        problems.append(
            (
                (*loc, "hcas"),
                f"rails must be 0..{len(profile.hcas) - 1}, each once; got {rails}",
            )
        )
    devices = Counter([h.device for h in profile.hcas] + [n.device for n in profile.nics])
    for device, count in sorted(devices.items()):
        if count > 1:
            problems.append(((*loc, "hcas"), f"device {device} is listed {count} times"))
    pcis = Counter([h.pci for h in profile.hcas] + [n.pci for n in profile.nics])
    for pci, count in sorted(pcis.items()):
        if count > 1:
            problems.append(((*loc, "hcas"), f"PCI address {pci} is listed {count} times"))
    if profile.gpu_pci and len(profile.gpu_pci) != profile.gpu_count:
        problems.append(
            ((*loc, "gpu_pci"), f"{len(profile.gpu_pci)} addresses for {profile.gpu_count} GPUs")
        )
    if profile.gpu_sockets:
        if len(profile.gpu_sockets) != profile.gpu_count:
            problems.append(
                (
                    (*loc, "gpu_sockets"),
                    f"{len(profile.gpu_sockets)} entries for {profile.gpu_count} GPUs",
                )
            )
        bad = [s for s in profile.gpu_sockets if not 0 <= s < profile.cpu_sockets]
        if bad:
            problems.append(
                ((*loc, "gpu_sockets"), f"socket {bad[0]} does not exist ({profile.cpu_sockets})")
            )
    if profile.slurm_real_memory_mib > profile.memory_gib * 1024:
        problems.append(
            (
                (*loc, "slurm_real_memory_mib"),
                f"{profile.slurm_real_memory_mib} MiB is more than the installed "
                f"{profile.memory_gib} GiB",
            )
        )
    problems += _check_link(
        profile.expected_speed, profile.expected_width, profile.expected_rate_gbps, loc
    )
    return problems


def _check_link(speed: str, width: str, rate: int, loc: Loc) -> list[Problem]:
    expected = LANE_RATE_GBPS[speed] * WIDTH_LANES[width]
    if rate != expected:
        message = f"{width} {speed} runs at {expected} Gb/s, not {rate}"
        return [((*loc, "expected_rate_gbps"), message)]
    return []


def _check_profiles(cluster: Cluster) -> list[Problem]:
    problems: list[Problem] = []
    known = cluster.profile_names()
    for name, profile in cluster.profiles.items():
        loc: Loc = ("profiles", name)
        if profile.extends is not None and profile.extends not in known:
            problems.append(((*loc, "extends"), f"unknown profile {profile.extends!r}"))
        problems += _check_profile(profile, loc)
    for i, group in enumerate(cluster.nodes):
        if group.profile is not None and group.profile not in known:
            problems.append(
                (
                    ("nodes", i, "profile"),
                    f"unknown profile {group.profile!r}; known: {', '.join(known)}",
                )
            )
    return problems


def _check_hosts(cluster: Cluster, *, derive: bool = True) -> list[Problem]:
    problems: list[Problem] = []
    net = cluster.management.network
    seen_names: dict[str, int] = {}
    seen_addresses: dict[ipaddress.IPv4Address, str] = {}
    for i, group in enumerate(cluster.nodes):
        names = expand_hostlist(group.hosts)
        if not names:
            problems.append((("nodes", i, "hosts"), "the hostlist is empty"))
            continue
        for name in names:
            if not re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", name):
                problems.append((("nodes", i, "hosts"), f"{name!r} is not a valid hostname"))
                break
        dup = [n for n in names if n in seen_names]
        if dup:
            problems.append(
                (
                    ("nodes", i, "hosts"),
                    f"{dup[0]} is already in nodes[{seen_names[dup[0]]}]"
                    + (f" (and {len(dup) - 1} more)" if len(dup) > 1 else ""),
                )
            )
        for name in names:
            seen_names.setdefault(name, i)
        last = group.address + (len(names) - 1) if _fits(group.address, len(names)) else None
        if group.address not in net or last is None or last not in net:
            problems.append(
                (
                    ("nodes", i, "address"),
                    f"{len(names)} addresses from {group.address} do not fit in the "
                    f"management network {net}",
                )
            )
            continue
        if group.address == net.network_address or last == net.broadcast_address:
            problems.append(
                (
                    ("nodes", i, "address"),
                    f"addresses from {group.address} include the network or broadcast address",
                )
            )
        for offset, name in enumerate(names):
            address = group.address + offset
            if address in seen_addresses:
                problems.append(
                    (
                        ("nodes", i, "address"),
                        f"{address} ({name}) is already {seen_addresses[address]}'s address",
                    )
                )
                break
            seen_addresses[address] = name
    if derive:
        problems += _check_bmc(cluster)
    return problems


def _fits(address: ipaddress.IPv4Address, count: int) -> bool:
    return int(address) + count - 1 <= int(ipaddress.IPv4Address("255.255.255.255"))


def _check_bmc(cluster: Cluster) -> list[Problem]:
    problems: list[Problem] = []
    allowed = {"name", "number", "index", "su", "index_in_su"}
    patterns: list[tuple[Loc, str]] = [(("bmc", "address_pattern"), cluster.bmc.address_pattern)]
    for i, group in enumerate(cluster.nodes):
        if group.bmc_address_pattern is not None:
            patterns.append((("nodes", i, "bmc_address_pattern"), group.bmc_address_pattern))
    for loc, pattern in patterns:
        fields = _format_fields(pattern)
        if fields is None:
            problems.append((loc, f"not a valid format string: {pattern!r}"))
            continue
        unknown = {f.split(".")[0].split("[")[0] for f in fields} - allowed
        if unknown:
            problems.append(
                (loc, f"unknown field {{{sorted(unknown)[0]}}}; use {', '.join(sorted(allowed))}")
            )
    if problems:
        return problems
    seen: dict[str, str] = {}
    for node in cluster.hosts():
        group = cluster.nodes[node.group]
        where: Loc = ("nodes", node.group, "bmc_address_pattern")
        if group.bmc_address_pattern is None:
            if not group.profile:
                continue
            where = ("bmc", "address_pattern")
        if node.bmc_address is None:
            problems.append((where, f"cannot fill the pattern for {node.name}"))
            return problems
        if node.bmc_address in seen and seen[node.bmc_address] != node.name:
            problems.append(
                (
                    where,
                    f"{node.name} and {seen[node.bmc_address]} get the same BMC "
                    f"address {node.bmc_address}",
                )
            )
            return problems
        seen[node.bmc_address] = node.name
        net = cluster.bmc.network
        ip = _ip_of(node.bmc_address)
        if net is not None and ip is not None and ip not in net:
            problems.append(
                (where, f"{node.name}'s BMC address {node.bmc_address} is outside {net}")
            )
            return problems
    return problems


def _ip_of(address: str) -> ipaddress.IPv4Address | None:
    """The IPv4 host of `10.0.0.1`, `10.0.0.1:8001` or `https://10.0.0.1/...`, else None."""
    host = re.sub(r"^[a-z]+://", "", address).split("/")[0].rsplit(":", 1)[0]
    try:
        return ipaddress.IPv4Address(host)
    except ValueError:
        return None


def _check_references(cluster: Cluster) -> list[Problem]:
    problems: list[Problem] = []
    names = {n.name for n in cluster.hosts()}
    gpu = {n.name for n in cluster.gpu_nodes()}

    def need(loc: Loc, hostlist: str | None, what: str, *, gpu_only: bool = False) -> None:
        if not hostlist:
            return
        for name in expand_hostlist(hostlist):
            if name not in names:
                problems.append((loc, f"{what} {name} is not a host of this cluster"))
                return
            if gpu_only and name not in gpu:
                problems.append((loc, f"{name} is not a GPU node"))
                return

    need(("slurm", "controller"), cluster.slurm.controller, "controller")
    if len(expand_hostlist(cluster.slurm.controller)) != 1:
        problems.append((("slurm", "controller"), "give exactly one controller host"))
    need(("slurm", "accounting_host"), cluster.slurm.accounting_host, "slurmdbd host")
    need(("slurm", "login_nodes"), cluster.slurm.login_nodes, "login node")
    need(("fabric", "subnet_manager"), cluster.fabric.subnet_manager, "subnet manager")
    standby = cluster.fabric.standby_subnet_manager
    need(("fabric", "standby_subnet_manager"), standby, "standby subnet manager")
    if standby and standby == cluster.fabric.subnet_manager:
        problems.append((("fabric", "standby_subnet_manager"), "the standby must be another host"))
    if cluster.fabric.ufm_url and cluster.fabric.subnet_manager_mode != "ufm":
        problems.append(
            (
                ("fabric", "ufm_url"),
                "only `subnet_manager_mode: ufm` asks a UFM; set it, or remove ufm_url",
            )
        )
    if standby and cluster.fabric.subnet_manager_mode == "ufm":
        problems.append(
            (
                ("fabric", "standby_subnet_manager"),
                "an external UFM runs its own standby; set subnet_manager_mode: opensm "
                "or remove the standby",
            )
        )
    for i, part in enumerate(cluster.slurm.partitions):
        need(("slurm", "partitions", i, "nodes"), part.nodes, "partition node", gpu_only=True)
    return problems


def _check_fabric(cluster: Cluster) -> list[Problem]:
    problems: list[Problem] = []
    fabric = cluster.fabric
    for name, profile in cluster.gpu_profiles().items():
        where = f"profile {name}"
        if len(profile.hcas) != fabric.rails:
            problems.append(
                (
                    ("fabric", "rails"),
                    f"{fabric.rails} rails but {where} has {len(profile.hcas)} compute HCAs",
                )
            )
        link = (profile.expected_speed, profile.expected_width, profile.expected_rate_gbps)
        fabric_link = (fabric.expected_speed, fabric.expected_width, fabric.expected_rate_gbps)
        if link != fabric_link:
            problems.append(
                (
                    ("fabric", "expected_speed"),
                    f"the fabric is {fabric.expected_width} {fabric.expected_speed} "
                    f"{fabric.expected_rate_gbps} Gb/s but {where} expects "
                    f"{profile.expected_width} {profile.expected_speed} "
                    f"{profile.expected_rate_gbps} Gb/s",
                )
            )
    layouts = {
        name: [h.device for h in p.compute_hcas] for name, p in cluster.gpu_profiles().items()
    }
    if len({tuple(v) for v in layouts.values()}) > 1:
        # nccl.conf names the compute HCAs once for the whole cluster.
        problems.append(
            (
                ("nodes",),
                "GPU profiles disagree on the compute HCAs per rail: "
                + "; ".join(f"{k}: {','.join(v)}" for k, v in sorted(layouts.items())),
            )
        )
    problems += _check_link(
        fabric.expected_speed, fabric.expected_width, fabric.expected_rate_gbps, ("fabric",)
    )
    problems += _check_as_cabled(cluster)
    uplinks = fabric.uplink_count
    if fabric.placement or fabric.uplinks:
        pass  # cabled as it is (an adopted fabric): the ports are judged one by one above
    elif fabric.su_size + uplinks > fabric.leaf_ports:
        field = "uplinks_per_leaf" if fabric.uplinks_per_leaf else "su_size"
        loc: Loc = ("fabric", field)
        problems.append(
            (
                loc,
                f"an SU of {fabric.su_size} nodes plus {uplinks} up-ports needs "
                f"{fabric.su_size + uplinks} leaf ports; a leaf has {fabric.leaf_ports}",
            )
        )
    su_count = cluster.su_count
    spines = fabric.spine_count(su_count)
    if spines is None:
        problems.append(
            (
                ("fabric", "spines"),
                f"{su_count} SUs is beyond the SuperPOD table "
                f"({', '.join(f'{k} SU: {v}' for k, v in SUPERPOD_SPINES.items())}); "
                "give the spine count",
            )
        )
    elif not (fabric.uplinks or fabric.placement):  # the round-robin rule's arithmetic only
        if uplinks % spines:
            problems.append(
                (
                    ("fabric", "spines"),
                    f"{uplinks} up-ports per leaf do not divide evenly over {spines} spines",
                )
            )
        leaves = su_count * fabric.rails
        load = leaves * uplinks / spines
        if load > fabric.spine_port_count:
            problems.append(
                (
                    ("fabric", "spines"),
                    f"{leaves} leaves x {uplinks} up-ports over {spines} spines need "
                    f"{load:g} ports per spine; a spine has {fabric.spine_port_count}",
                )
            )
    leaf_fields = _format_fields(fabric.leaf_name_pattern)
    if (
        leaf_fields is None
        or not leaf_fields <= {"su", "rail", "rail1"}
        or not leaf_fields & {"rail", "rail1"}
    ):
        problems.append(
            (
                ("fabric", "leaf_name_pattern"),
                "must be a format string over {su} and {rail} (0-based) or {rail1} (1-based)",
            )
        )
    elif su_count > 1 and "su" not in leaf_fields and not fabric.leaves:
        problems.append(
            (("fabric", "leaf_name_pattern"), "needs {su}: leaves of different SUs share names")
        )
    spine_fields = _format_fields(fabric.spine_name_pattern)
    if spine_fields is None or {f.split(":")[0] for f in spine_fields} != {"n"}:
        problems.append((("fabric", "spine_name_pattern"), "must be a format string over {n}"))
    try:
        regex = re.compile(fabric.switch_name_pattern)
    except re.error as exc:
        problems.append((("fabric", "switch_name_pattern"), f"not a valid regex: {exc}"))
    else:
        if "name" not in regex.groupindex:
            problems.append(
                (("fabric", "switch_name_pattern"), "needs a named group (?P<name>...)")
            )
    if "%h" not in fabric.node_description_format:
        problems.append((("fabric", "node_description_format"), "must contain %h to name the host"))
    return problems


def _check_as_cabled(cluster: Cluster) -> list[Problem]:
    """An adopted fabric's switch map, placement, cables and uplinks name what exists."""
    fabric = cluster.fabric
    problems: list[Problem] = []
    gpu = {node.name: node for node in cluster.gpu_nodes()}
    switches = set(fabric.leaves) | set(fabric.spine_switches)
    for name in fabric.placement:
        if name not in gpu:
            problems.append((("fabric", "placement", name), f"{name} is not a GPU node"))
    for name, place in fabric.placement.items():
        if place.port > fabric.leaf_ports:
            problems.append(
                (
                    ("fabric", "placement", name, "port"),
                    f"port {place.port} on a leaf of {fabric.leaf_ports} ports",
                )
            )
    if fabric.placement:
        unplaced = [name for name in gpu if name not in fabric.placement]
        if unplaced:
            problems.append(
                (
                    ("fabric", "placement"),
                    f"{len(unplaced)} GPU nodes have no placement (first: {unplaced[0]})",
                )
            )
    if fabric.leaves:
        # Every HCA cabled by its node's placement needs its SU's leaf of its rail.
        elsewhere = {(c.node, c.hca) for c in fabric.cables}
        wanted = {
            (node.su, hca.rail)
            for node in gpu.values()
            if node.profile is not None
            for hca in node.profile.hcas
            if (node.name, hca.device) not in elsewhere
        }
        have = {(leaf.su, leaf.rail) for leaf in fabric.leaves.values()}
        for su, rail in sorted(w for w in wanted - have if w[0] is not None):
            problems.append(
                (("fabric", "leaves"), f"no leaf for SU {su} rail {rail}, which GPU nodes use")
            )
    for i, cable in enumerate(fabric.cables):
        loc: Loc = ("fabric", "cables", i)
        node = gpu.get(cable.node)
        if node is None:
            problems.append(((*loc, "node"), f"{cable.node} is not a GPU node"))
        elif node.profile is not None and cable.hca not in {h.device for h in node.profile.hcas}:
            problems.append(((*loc, "hca"), f"{cable.hca} is not a compute HCA of {cable.node}"))
        if cable.leaf is not None and switches and cable.leaf not in switches:
            problems.append(((*loc, "leaf"), f"{cable.leaf} is not in fabric.leaves"))
    spine_ports = fabric.spine_port_count
    for i, (leaf, leaf_port, spine, spine_port) in enumerate(fabric.uplinks):
        loc = ("fabric", "uplinks", i)
        if fabric.leaves and leaf not in fabric.leaves:
            problems.append((loc, f"{leaf} is not in fabric.leaves"))
        if fabric.spine_switches and spine not in fabric.spine_switches:
            problems.append((loc, f"{spine} is not in fabric.spine_switches"))
        if leaf_port > fabric.leaf_ports or spine_port > spine_ports:
            problems.append((loc, f"a port past the switch's ({fabric.leaf_ports}/{spine_ports})"))
    return problems


def _check_slurm_and_limits(cluster: Cluster) -> list[Problem]:
    problems: list[Problem] = []
    health = cluster.thresholds.health
    if health.gpu_temp_warn_c >= health.gpu_temp_error_c:
        problems.append(
            (
                ("thresholds", "health", "gpu_temp_warn_c"),
                f"warning at {health.gpu_temp_warn_c} C must be below the error at "
                f"{health.gpu_temp_error_c} C",
            )
        )
    parts = cluster.slurm.partitions
    defaults = [i for i, p in enumerate(parts) if p.default]
    if len(defaults) > 1:
        problems.append(
            (("slurm", "partitions", defaults[1], "default"), "only one partition can be default")
        )
    counts = Counter(p.name for p in parts)
    for i, part in enumerate(parts):
        if counts[part.name] > 1:
            problems.append((("slurm", "partitions", i, "name"), f"{part.name} is listed twice"))
            break
    if not cluster.gpu_nodes() and not any(g.profile for g in cluster.nodes):
        problems.append((("nodes",), "no GPU nodes: give at least one group a profile"))
    problems += _check_gpu_defaults(cluster)
    return problems


def _check_gpu_defaults(cluster: Cluster) -> list[Problem]:
    """A default per GPU that a job asking for every GPU of a node could not get there would
    leave that job pending forever: refuse it, naming the profile that cannot hold it."""
    slurm = cluster.slurm
    problems: list[Problem] = []
    profiles = {n.profile_name: n.profile for n in cluster.gpu_nodes() if n.profile is not None}
    for name, p in sorted(profiles.items(), key=lambda item: str(item[0])):
        if p is None or p.gpu_count == 0:
            continue
        mem = slurm.def_mem_per_gpu_mib
        if mem is not None and mem * p.gpu_count > p.slurm_real_memory_mib:
            problems.append(
                (
                    ("slurm", "def_mem_per_gpu_mib"),
                    f"{mem} MiB x {p.gpu_count} GPUs is more than profile {name}'s RealMemory "
                    f"{p.slurm_real_memory_mib} MiB: a job on all its GPUs would never start",
                )
            )
        cpu = slurm.def_cpu_per_gpu
        if cpu is not None and cpu * p.gpu_count > p.cpus:
            problems.append(
                (
                    ("slurm", "def_cpu_per_gpu"),
                    f"{cpu} x {p.gpu_count} GPUs is more than profile {name}'s {p.cpus} CPUs: "
                    "a job on all its GPUs would never start",
                )
            )
    return problems


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _check_storage(cluster: Cluster) -> list[Problem]:
    """The shared filesystem and the scratch are two mounts, and a training job's folders lie
    on the one each is for: a checkpoint synced "to the shared filesystem" that is really on
    the node's own disk is lost with the node."""
    problems: list[Problem] = []
    shared, scratch = cluster.storage.shared, cluster.storage.scratch
    if (
        shared is not None
        and scratch is not None
        and (_under(shared.mount, scratch.mount) or _under(scratch.mount, shared.mount))
    ):
        problems.append(
            (
                ("storage", "scratch", "mount"),
                f"{scratch.mount} and the shared filesystem's {shared.mount} overlap; "
                "give them separate folders",
            )
        )
    training = cluster.training
    if shared is not None:
        for field in ("checkpoint_dir", "reports_dir"):
            value = getattr(training, field)
            if value is not None and not _under(value, shared.mount):
                problems.append(
                    (
                        ("training", field),
                        f"{value} is not on the shared filesystem ({shared.mount}): every node "
                        "and the watcher must see it",
                    )
                )
    local = training.local_checkpoint_dir
    if scratch is not None and local is not None and not _under(local, scratch.mount):
        problems.append(
            (
                ("training", "local_checkpoint_dir"),
                f"{local} is not on the local scratch ({scratch.mount})",
            )
        )
    return problems


# The slurm role's plugins when ansible_vars leave them alone (roles/slurm/defaults/main.yml and
# vars/main.yml; a unit test holds them together): all three run on cgroups.
SLURM_CGROUP_DEFAULTS = {
    "slurm_proctrack_type": "proctrack/cgroup",
    "slurm_task_plugin": "task/cgroup,task/affinity",
    "JobAcctGatherType": "jobacct_gather/cgroup",
}


def _slurm_uses_cgroups(cluster: Cluster) -> bool:
    """Whether the Slurm the roles configure runs a cgroup plugin (proctrack, task or job
    accounting); a value only known to Ansible (a template) counts as one."""
    variables = cluster.ansible_vars
    conf = variables.get("slurm_conf")
    conf = conf if isinstance(conf, dict) else {}
    values = [
        conf.get(
            "ProctrackType",
            variables.get("slurm_proctrack_type", SLURM_CGROUP_DEFAULTS["slurm_proctrack_type"]),
        ),
        conf.get(
            "TaskPlugin",
            variables.get("slurm_task_plugin", SLURM_CGROUP_DEFAULTS["slurm_task_plugin"]),
        ),
        conf.get("JobAcctGatherType", SLURM_CGROUP_DEFAULTS["JobAcctGatherType"]),
    ]
    return any(not isinstance(v, str) or "cgroup" in v or "{{" in v for v in values)


def _release_honours(pin: str, release: str) -> bool:
    """`23.11` and `23.11.4` are honoured by a 23.11.4 install; `23.11.5` and `24.11` are not."""
    wanted = pin.split("-")[0].split(".")
    return wanted == release.split(".")[: len(wanted)]


def _check_slurm_source(cluster: Cluster) -> list[Problem]:
    """`slurm.packages` against what each OS can install: Ubuntu 22.04's own Slurm cannot run
    the cgroup plugins, the distribution's Slurm is the OS's release whatever the spec pins, and
    SchedMD's packages need the repository and the release it serves."""
    problems: list[Problem] = []
    slurm = cluster.slurm
    software = cluster.software
    version = software.slurm_version
    # The groups with a host that runs a Slurm daemon or its clients.
    slurm_roles = {ROLE_GPU, ROLE_CONTROLLER, ROLE_SLURMDBD, ROLE_LOGIN}
    in_slurm = {n.group for n in cluster.hosts() if slurm_roles & set(n.roles)}
    groups = [(i, group) for i, group in enumerate(cluster.nodes) if i in in_slurm]
    if slurm.packages == "schedmd":
        if slurm.repository is None:
            problems.append(
                (
                    ("slurm", "packages"),
                    "schedmd needs `slurm.repository`: the site's apt repository of slurm-smd "
                    "packages (SchedMD publishes Slurm as source only; build them from the "
                    "release tarball with its debian/ folder)",
                )
            )
        if version is None:
            problems.append(
                (
                    ("slurm", "packages"),
                    "schedmd needs `software.slurm_version`: the release slurm.repository serves",
                )
            )
        return problems
    if slurm.repository is not None:
        problems.append(
            (
                ("slurm", "repository"),
                "only `slurm.packages: schedmd` installs from it; with `distribution` each OS's "
                "own Slurm is installed: set `slurm.packages: schedmd` or remove the repository",
            )
        )
    uses_cgroups = _slurm_uses_cgroups(cluster)
    unpinnable: dict[str, list[str]] = {}
    for i, group in groups:
        named = f"nodes[{i}] ({group.hosts})"
        if group.os is None:
            if version is not None:
                problems.append(
                    (
                        ("software", "slurm_version"),
                        f"slurm.packages: distribution installs each OS's own Slurm, and {named} "
                        f"states no `os` to hold {version} to; state it, or leave "
                        "software.slurm_version out",
                    )
                )
            continue
        release = DISTRIBUTION_SLURM[group.os]
        if group.os == "ubuntu2204" and uses_cgroups:
            title = OS_TITLES[group.os]
            problems.append(
                (
                    ("nodes", i, "os"),
                    f"{title} ships Slurm {release}, which has no cgroup v2 support, and boots "
                    "the unified cgroup v2 hierarchy: slurmd cannot start under Slurm's cgroup "
                    f"plugins on {group.hosts}; set `slurm.packages: schedmd` with "
                    "`slurm.repository` and `software.slurm_version` (SchedMD's slurm-smd "
                    f"packages built for {title})",
                )
            )
        elif version is not None and not _release_honours(version, release):
            unpinnable.setdefault(group.os, []).append(named)
    for os_name, named_groups in unpinnable.items():
        release = DISTRIBUTION_SLURM[os_name]
        problems.append(
            (
                ("software", "slurm_version"),
                f"slurm.packages: distribution installs {OS_TITLES[os_name]}'s own Slurm "
                f"{release} on {', '.join(named_groups)}, not {version}; set "
                f"`slurm.packages: schedmd` with `slurm.repository` to run {version}, or pin "
                f"{release}",
            )
        )
    return problems


def problems_as_text(problems: list[Problem]) -> list[str]:
    """Problems as `path: message` lines (for callers without a file)."""
    return [f"{dotted(loc)}: {msg}" for loc, msg in problems]


def dotted(loc: tuple[Any, ...]) -> str:
    """`('nodes', 0, 'hosts')` -> `nodes[0].hosts`. A mapping key is the spec's own text (a
    switch name an adopted fabric gave it): a line break or control character in it is shown
    escaped, so a problem stays one line and never reaches the terminal raw."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = str(part)
            if not text.isprintable():
                text = text.encode("unicode_escape").decode("ascii")
            out += ("." if out else "") + text
    return out
