"""Turns a validated `Cluster` into the files of an inventory folder and writes them atomically."""

from __future__ import annotations

import difflib
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import yaml
from ClusterShell.NodeSet import NodeSet

from cluster_tool.errors import ClusterToolError, UsageError
from cluster_tool.fabric.plan import (
    cabling_csv,
    cabling_plan,
    leaves,
    spines,
    switch_links,
    switch_links_csv,
)
from cluster_tool.render import guards
from cluster_tool.render.output_dir import OutputDirError, publish, read_rendered
from cluster_tool.spec.models import (
    ROLE_CONTROLLER,
    ROLE_GPU,
    ROLE_LOGIN,
    ROLE_MANAGEMENT,
    ROLE_SLURMDBD,
    ROLE_SUBNET_MANAGER,
    Cluster,
    Node,
    NodeProfile,
    expand_hostlist,
)

TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "templates" / "render"

# Inventory group of each role; roles get these names from group_vars, never hard-coded.
GROUPS = {
    ROLE_CONTROLLER: "slurm_controller",
    ROLE_SLURMDBD: "slurmdbd",
    ROLE_LOGIN: "login",
    ROLE_GPU: "gpu",
    ROLE_MANAGEMENT: "management",
    ROLE_SUBNET_MANAGER: "subnet_manager",
}

HEADER = "Rendered by cluster-tool from the cluster spec; edit the spec and re-render."


class RenderError(ClusterToolError):
    """The output folder could not be written; the previous output is left as it was."""

    exit_code = 2


@dataclass
class RenderResult:
    """What a render wrote (or, with --diff, would change)."""

    out_dir: Path
    files: list[str]
    changed: list[str] = field(default_factory=list)
    diff: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """JSON-able summary."""
        return {
            "out_dir": str(self.out_dir),
            "files": self.files,
            "changed": self.changed,
        }


def render(cluster: Cluster, out_dir: Path) -> RenderResult:
    """Render every file and swap the folder into place; returns what changed."""
    files = render_files(cluster)
    changed = _changed(files, _existing(Path(out_dir)))
    write_atomically(files, Path(out_dir))
    return RenderResult(Path(out_dir), sorted(files), changed)


def diff_rendered(cluster: Cluster, out_dir: Path) -> RenderResult:
    """What `render` would change in `out_dir`, as a unified diff; writes nothing."""
    files = render_files(cluster)
    out = Path(out_dir)
    lines: list[str] = []
    existing = _existing(out)
    for rel in sorted(set(files) | set(existing)):
        old = existing.get(rel, "")
        new = files.get(rel, "")
        if old == new:
            continue
        lines += difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"a/{rel}" if rel in existing else "/dev/null",
            tofile=f"b/{rel}" if rel in files else "/dev/null",
        )
    return RenderResult(out, sorted(files), _changed(files, existing), lines)


def render_files(cluster: Cluster) -> dict[str, str]:
    """Every output file, relative path -> content. Pure: same spec, same bytes."""
    env = _environment()
    ctx = _context(cluster)
    files: dict[str, str] = {}
    for template in sorted(env.list_templates(extensions=["j2"])):
        rel = template.removesuffix(".j2")
        if rel == "nccl-tests/collective.sbatch":
            for coll in cluster.nccl.tests.collectives:
                files[f"nccl-tests/{coll}.sbatch"] = env.get_template(template).render(
                    ctx, collective=coll
                )
            continue
        files[rel] = env.get_template(template).render(ctx)
    files["cabling.csv"] = cabling_csv(cabling_plan(cluster))
    files["switch-links.csv"] = switch_links_csv(switch_links(cluster))
    spec = cluster.model_dump(mode="json", by_alias=True)
    files["spec.json"] = json.dumps(spec, indent=2, sort_keys=True) + "\n"
    return dict(sorted(files.items()))


def render_nccl_conf(cluster: Cluster) -> str:
    """The rendered `nccl.conf` alone (what the health check compares /etc/nccl.conf with),
    without building the rest of the inventory; the same text `render_files` gives."""
    template = _environment().get_template("nccl.conf.j2")
    return template.render(header=HEADER, nccl_env=_nccl_env(cluster))


def write_atomically(files: dict[str, str], out_dir: Path) -> None:
    """Write into a private sibling folder, then swap it with `out_dir` in one rename, under a
    lock (`render.output_dir`). A failure leaves the previous output untouched."""
    try:
        publish(files, out_dir)
    except OutputDirError as exc:
        raise RenderError(str(exc)) from None


def _existing(out: Path) -> dict[str, str]:
    # Checked before it is walked, read without following links (`render -o /`, `--diff`).
    try:
        return read_rendered(out)
    except OutputDirError as exc:
        raise RenderError(str(exc)) from None


def default_out_dir(cluster: Cluster) -> Path:
    """`inventory/<cluster name>`, relative to the working directory."""
    return Path("inventory") / cluster.name


# --- internals ---------------------------------------------------------------------------


def _changed(files: dict[str, str], existing: dict[str, str]) -> list[str]:
    changed = [rel for rel, text in files.items() if existing.get(rel) != text]
    removed = [rel for rel in existing if rel not in files]
    return sorted(changed + removed)


# --- quoting per format --------------------------------------------------------------------
# Spec strings are typed, so none of these should ever meet a hostile value; each filter still
# writes a value so that its file's own grammar reads it back as that value and nothing else,
# and refuses one it cannot write that way.

# Variables whose value is meant as an Ansible template: everything else rendered from the spec
# reaches Ansible marked `!unsafe`, so Jinja in a spec value is data, never code.
TEMPLATED_VARS = frozenset(
    {
        "cluster_cabling_csv",
        "cluster_switch_links_csv",
        "nccl_conf_file",
        "nccl_tests_jobs_dir",
        "slurm_nodes_conf_file",
        "slurm_gres_conf_file",
        "slurm_topology_conf_file",
    }
)

UNSAFE_TAG = "!unsafe"
_STR_TAG = "tag:yaml.org,2002:str"
_RESOLVER = yaml.resolver.Resolver()


class Unsafe(str):
    """A string Ansible must take as data: written as `!unsafe "..."`."""


def _resolves_to_str(text: str) -> bool:
    # Ansible resolves an `!unsafe` scalar's type as if it were plain (`!unsafe '12.4'` is a
    # float): only strings that stay strings are tagged; the others hold no template anyway.
    return _RESOLVER.resolve(yaml.ScalarNode, text, (True, False)) == _STR_TAG


def mark_unsafe(data: Any) -> Any:
    """`data` with every string (not mapping keys) wrapped in `Unsafe`."""
    if isinstance(data, dict):
        return {key: mark_unsafe(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [mark_unsafe(value) for value in data]
    if isinstance(data, str) and not isinstance(data, Unsafe) and _resolves_to_str(data):
        return Unsafe(data)
    return data


class _IndentedDumper(yaml.SafeDumper):
    """Indents list items under their key, as yamllint's default style wants."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _represent_unsafe(dumper: yaml.SafeDumper, value: Unsafe) -> yaml.ScalarNode:
    return dumper.represent_scalar(UNSAFE_TAG, str(value), style='"')


_IndentedDumper.add_representer(Unsafe, _represent_unsafe)


class RenderedYamlLoader(yaml.SafeLoader):
    """Reads rendered YAML back as plain data (`!unsafe` strings as strings), for the tool's
    own readers and tests; Ansible reads the same files with its own loader."""


def _construct_unsafe(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    raise yaml.constructor.ConstructorError(None, None, "bad !unsafe node", node.start_mark)


RenderedYamlLoader.add_constructor(UNSAFE_TAG, _construct_unsafe)


def load_rendered_yaml(text: str) -> Any:
    """A rendered YAML file (hosts.yml, group_vars/all.yml) as plain data."""
    return yaml.load(text, Loader=RenderedYamlLoader)


_LINE_MAX = 120  # the project's yamllint line-length


def _to_yaml(data: Any) -> str:
    text = _dump_yaml(data)
    # The guard for a block: read back as Ansible's loader reads it, it is exactly the data.
    if load_rendered_yaml(text) != data:
        raise RenderError("group_vars/all.yml would not read back as the values rendered")
    return Checked(text, lines=True)


def _dump_yaml(data: Any) -> str:
    text = yaml.dump(
        data, Dumper=_IndentedDumper, sort_keys=False, default_flow_style=False, width=110
    )
    # PyYAML cannot fold a long string without spaces (a URL behind its `!unsafe` tag).
    lines = []
    for line in text.rstrip("\n").split("\n"):
        if len(line) > _LINE_MAX:
            indent = line[: len(line) - len(line.lstrip())]
            lines.append(f"{indent}# yamllint disable-line rule:line-length")
        lines.append(line)
    return "\n".join(lines)


_PLAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:/-]*$")


def _yaml_scalar(value: Any) -> str:
    """One YAML scalar: ints and bools as such, strings plain when safe, else quoted;
    `Unsafe` strings tagged for Ansible."""
    if isinstance(value, bool):
        return Checked("true" if value else "false")
    if isinstance(value, int):
        return Checked(str(value))
    text = str(value)
    if isinstance(value, Unsafe):
        written = f"{UNSAFE_TAG} {json.dumps(text)}"
    # PyYAML's own implicit resolver says whether a plain scalar would stay a string.
    elif _PLAIN.match(text) and _resolves_to_str(text):
        written = text
    else:
        written = json.dumps(text)  # a JSON string is a valid double-quoted YAML scalar
    return _guarded("yaml", written, value=text)


# slurm.conf and its includes: `Key=Value` words split on whitespace, `#` starts a comment
# anywhere, double quotes group a value with spaces and have no escape of their own.
_SLURM_PLAIN = re.compile(r"[A-Za-z0-9_.,:/\[\]+@%-]+")


def _slurm_value(value: Any) -> str:
    text = str(value)
    if _SLURM_PLAIN.fullmatch(text):
        return _guarded("slurm", text)
    if not text or any(c in text for c in '"#=\\') or not text.isprintable():
        raise RenderError(f"{text!r} cannot be written as a Slurm config value")
    return _guarded("slurm", f'"{text}"')


# nccl.conf: NCCL reads `NAME=VALUE` up to the end of the line, with no quoting at all, and
# sets each as an environment variable; a value can hold anything but a line break.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env_line(name: str, value: Any) -> str:
    text = str(value)
    if not _ENV_NAME.fullmatch(name):
        raise RenderError(f"{name!r} cannot be written as an environment variable name")
    if not text.isprintable() or len(text) > 1023:
        raise RenderError(f"{name}: {text!r} cannot be written into nccl.conf")
    return _guarded("nccl", f"{name}={text}")


def _sh_quote(value: Any) -> str:
    """One shell word, whatever it holds (`shlex.quote`: single quotes when needed)."""
    return _guarded("shell", shlex.quote(str(value)))


_SBATCH_PLAIN = re.compile(r"[A-Za-z0-9_.,:/\[\]+@%=-]+")


def _sbatch_value(value: Any) -> str:
    # `#SBATCH` lines are read by sbatch, not bash: one word per option, no quoting needed
    # for the values the spec can hold, and none that needs it is written.
    text = str(value)
    if not _SBATCH_PLAIN.fullmatch(text):
        raise RenderError(f"{text!r} cannot be written as an #SBATCH option value")
    return _guarded("sbatch", text)


def _comment(value: Any) -> str:
    """Text on a comment line the template wrote: it stays on that line."""
    return _guarded("comment", str(value))


# --- the guard after rendering ----------------------------------------------------------------
# Each filter above writes a value in its file's grammar; the guard then checks the text it
# wrote (whatever type the value came through) against that grammar, and `_finalize` checks
# every value a template writes without a filter against its file's. Either refuses with a
# RenderError (exit 2) before anything is written.


class Checked(str):
    """Text a filter wrote and the guard of its format passed; `lines` for a YAML block."""

    lines: bool

    def __new__(cls, text: str, lines: bool = False) -> Checked:
        made = super().__new__(cls, text)
        made.lines = lines
        return made


def _guarded(fmt: str, text: str, value: Any = None) -> Checked:
    try:
        return Checked(guards.check(fmt, text, value=value))
    except guards.UnsafeValue as exc:
        raise RenderError(str(exc)) from None


@jinja2.pass_context
def _finalize(context: jinja2.runtime.Context, value: Any) -> Any:
    """Every `{{ ... }}` a template writes: a filter's checked text passes (one line unless it is
    a YAML block), anything else is checked against the grammar of the template's file."""
    if isinstance(value, Checked):
        if not value.lines and guards.FORMATS["comment"](value) is not None:
            raise RenderError(f"{value!r} would break a line of {context.name}")
        return value
    if isinstance(value, bool | int) or value is None:
        return value
    fmt = guards.format_of(context.name or "")
    return _guarded(fmt, str(value), value=str(value) if fmt == "yaml" else None)


def _environment() -> jinja2.Environment:
    if not TEMPLATE_DIR.is_dir():
        raise UsageError(f"templates not found at {TEMPLATE_DIR}")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # plain config files, not HTML
        finalize=_finalize,
    )
    env.filters["to_yaml"] = _to_yaml
    env.filters["yaml_scalar"] = _yaml_scalar
    env.filters["slurm"] = _slurm_value
    env.filters["env_line"] = _env_line
    env.filters["sh"] = _sh_quote
    env.filters["sbatch"] = _sbatch_value
    env.filters["fold"] = _fold
    env.filters["comment"] = _comment
    return env


def _fold(names: list[str]) -> str:
    """Hosts as a folded Slurm hostlist (`gpu[001-004]`)."""
    return str(NodeSet.fromlist(names)) if names else ""


def _fold_ints(values: list[int]) -> str:
    """`[0, 1, 2, 3]` -> `0-3`, `[0, 2, 3]` -> `0,2-3`."""
    runs: list[list[int]] = []
    for v in sorted(set(values)):
        if runs and runs[-1][1] == v - 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _runs(nodes: list[Node], key: Any) -> list[tuple[Any, list[Node]]]:
    """Consecutive nodes grouped by `key(node)`, order kept."""
    out: list[tuple[Any, list[Node]]] = []
    for node in nodes:
        k = key(node)
        if out and out[-1][0] == k:
            out[-1][1].append(node)
        else:
            out.append((k, [node]))
    return out


def _gres_lines(profile: NodeProfile) -> list[dict[str, str]]:
    """One gres.conf entry per run of GPUs on the same socket."""
    lines: list[dict[str, str]] = []
    gpus_by_socket: list[tuple[int, list[int]]] = []
    for gpu in range(profile.gpu_count):
        socket = profile.socket_of_gpu(gpu)
        if gpus_by_socket and gpus_by_socket[-1][0] == socket:
            gpus_by_socket[-1][1].append(gpu)
        else:
            gpus_by_socket.append((socket, [gpu]))
    for socket, gpus in gpus_by_socket:
        first = socket * profile.cpu_cores_per_socket
        cores = f"{first}-{first + profile.cpu_cores_per_socket - 1}"
        files = _fold_ints(gpus)
        device = f"/dev/nvidia{files}" if len(gpus) == 1 else f"/dev/nvidia[{files}]"
        lines.append({"file": device, "cores": cores})
    return lines


def _gpu_defaults(cluster: Cluster, names: list[str]) -> dict[str, int]:
    """`DefMemPerGPU` / `DefCpuPerGPU` of a partition: the spec's, else a GPU's share of the
    smallest node profile in it (so a job that names no --mem or CPUs gets its GPUs' share of
    the node, never the whole node); nothing for a partition without GPU nodes."""
    profiles = []
    for name in names:
        try:
            host = cluster.host(name)
        except KeyError:
            continue
        if host.profile is not None and host.profile.gpu_count > 0:
            profiles.append(host.profile)
    slurm = cluster.slurm
    if not profiles:
        return {}
    mem = slurm.def_mem_per_gpu_mib or min(p.slurm_real_memory_mib // p.gpu_count for p in profiles)
    cpu = slurm.def_cpu_per_gpu or min(max(1, p.cpus // p.gpu_count) for p in profiles)
    return {"def_mem_per_gpu": mem, "def_cpu_per_gpu": cpu}


def _first_gpu_profile(cluster: Cluster) -> NodeProfile | None:
    profiles = cluster.gpu_profiles()
    return next(iter(profiles.values())) if profiles else None


def _nccl_env(cluster: Cluster) -> dict[str, str]:
    """nccl.conf's variables: the compute HCAs in rail order, the socket interface, SHARP's
    settings for the jobs that turn CollNet on."""
    profile = _first_gpu_profile(cluster)
    compute_hcas = [h.device for h in profile.compute_hcas] if profile else []
    nccl_env: dict[str, str] = {
        # A leading '=' makes NCCL match names exactly: plain `mlx5_1` would also
        # select mlx5_10 and mlx5_11 by prefix.
        "NCCL_IB_HCA": "=" + ",".join(compute_hcas),
        "NCCL_SOCKET_IFNAME": "=" + cluster.socket_ifname,
    }
    # No NCCL_COLLNET_ENABLE here: nccl.conf is mounted into every container, and CollNet on
    # for all makes every job ask the aggregation manager for SHARP resources (a limited
    # number of trees). A job that wants SHARP sets it itself: the gate's CollNet step, the
    # planner's launch environment. These only act where CollNet is on.
    if cluster.fabric.sharp:
        nccl_env["SHARP_COLL_ENABLE_SAT"] = "1"
        nccl_env["SHARP_COLL_LOCK_ON_COMM_INIT"] = "1"
    nccl_env.update(dict(sorted(cluster.nccl.extra_env.items())))
    return nccl_env


def nccl_environment(cluster: Cluster) -> dict[str, str]:
    """The NCCL variables the cluster's nccl.conf sets, for a job script to export."""
    return _nccl_env(cluster)


def _storage_vars(cluster: Cluster) -> dict[str, Any]:
    """The shared_fs and local_scratch roles' variables (both off without a storage section).
    The training jobs' folders are made on the NFS server the role serves, sticky and
    world-writable as /tmp is: every user's run keeps its own folder inside."""
    out: dict[str, Any] = {}
    shared, scratch = cluster.storage.shared, cluster.storage.scratch
    if shared is not None:
        folders = []
        for path in (
            cluster.training.checkpoints(cluster.storage),
            cluster.training.reports(cluster.storage),
        ):
            if path is not None and path.startswith(shared.mount.rstrip("/") + "/"):
                folders.append({"path": path[len(shared.mount.rstrip("/")) + 1 :], "mode": "1777"})
        out |= {
            "shared_fs_enabled": True,
            "shared_fs_kind": shared.kind,
            "shared_fs_mount": shared.mount,
            "shared_fs_server": shared.server or "",
            "shared_fs_export": shared.export,
            "shared_fs_source": shared.source or "",
            "shared_fs_options": list(shared.options),
            "shared_fs_folders": folders,
        }
    if scratch is not None:
        out |= {
            "local_scratch_enabled": True,
            "local_scratch_mount": scratch.mount,
            "local_scratch_devices": list(scratch.devices),
            "local_scratch_filesystem": scratch.filesystem,
            "local_scratch_size": scratch.size or "",
        }
    return out


def _context(cluster: Cluster) -> dict[str, Any]:
    hosts = cluster.hosts()
    gpu_nodes = cluster.gpu_nodes()
    fabric = cluster.fabric
    su_groups = [f"su{su}" for su in range(1, cluster.su_count + 1)]

    # Inventory: host vars once under `all`, then role and SU groups by membership.
    inventory_hosts: list[dict[str, Any]] = []
    for node in hosts:
        entry: dict[str, Any] = {"ansible_host": node.address}
        if node.bmc_address is not None:
            entry["bmc_address"] = mark_unsafe(node.bmc_address)
        if node.su is not None:
            entry["su"] = node.su
            entry["index_in_su"] = node.index_in_su
        if node.profile_name is not None:
            entry["node_profile"] = mark_unsafe(node.profile_name)
        if node.os is not None:
            # The OS the spec says this host runs; the preflight holds the host to it.
            entry["node_os"] = node.os
        inventory_hosts.append({"name": node.name, "vars": entry})
    inventory_groups: dict[str, list[str]] = {}
    for role, group in GROUPS.items():
        members = [n.name for n in hosts if role in n.roles]
        if members:
            inventory_groups[group] = members
    for su, group in enumerate(su_groups, start=1):
        inventory_groups[group] = [n.name for n in gpu_nodes if n.su == su]
    # One group per stated OS (os_ubuntu2204, ...): where a site's per-OS settings go (mirrors,
    # group_vars/os_<name>.yml).
    for os_name in sorted({n.os for n in hosts if n.os is not None}):
        inventory_groups[f"os_{os_name}"] = [n.name for n in hosts if n.os == os_name]
    # The host this spec makes its NFS server: the storage phase converges it in a play of its
    # own before any client mounts, whatever the batch size (`cluster_serial`).
    shared = cluster.storage.shared
    if shared is not None and shared.kind == "nfs" and shared.server in {n.name for n in hosts}:
        inventory_groups["nfs_server"] = [str(shared.server)]

    profile = _first_gpu_profile(cluster)
    compute_hcas = [h.device for h in profile.compute_hcas] if profile else []
    nccl_env = _nccl_env(cluster)

    software = cluster.software
    repos = software.repositories
    slurm = cluster.slurm
    partitions = []
    for part in slurm.partitions:
        names = expand_hostlist(part.nodes) if part.nodes else [n.name for n in gpu_nodes]
        partitions.append(
            {
                "name": part.name,
                "nodes": _fold(names),
                "default": part.default,
                "max_time": part.max_time,
                **_gpu_defaults(cluster, names),
            }
        )
    group_vars: dict[str, Any] = {
        "cluster_name": cluster.name,
        "cluster_domain": cluster.management.domain or "",
        "cluster_groups": {role: GROUPS[role] for role in GROUPS} | {"su": su_groups},
        "cluster_slurm_controller": _fold(expand_hostlist(slurm.controller)),
        "cluster_slurmdbd_host": slurm.accounting_host or "",
        "cluster_login_nodes": expand_hostlist(slurm.login_nodes or ""),
        "cluster_subnet_manager": fabric.subnet_manager,
        # The opensm role: primary first (the higher sm_priority), or an external UFM, which runs
        # the SM (and SHARP's aggregation manager) itself: then no host runs OpenSM or sharp_am.
        "opensm_mode": fabric.subnet_manager_mode,
        "opensm_hosts": (
            [fabric.subnet_manager]
            + ([fabric.standby_subnet_manager] if fabric.standby_subnet_manager else [])
            if fabric.subnet_manager_mode == "opensm"
            else []
        ),
        "opensm_adaptive_routing": fabric.adaptive_routing or fabric.sharp,
        "cluster_management_network": str(cluster.management.network),
        "cluster_management_interface": cluster.management.interface,
        "cluster_bmc_credentials": {
            "username": cluster.bmc.credentials.username.describe(),
            "password": cluster.bmc.credentials.password.describe(),
        },
        "cluster_bmc_verify_tls": cluster.bmc.verify_tls,
        "cluster_fabric": {
            "rails": fabric.rails,
            "su_size": fabric.su_size,
            "su_count": cluster.su_count,
            "leaf_ports": fabric.leaf_ports,
            "spine_ports": fabric.spine_port_count,
            "uplinks_per_leaf": fabric.uplink_count,
            "leaves": [leaf.name for leaf in leaves(cluster)],
            "spines": spines(cluster),
            "switch_model": fabric.switch_model,
            "switch_name_pattern": fabric.switch_name_pattern,
            "node_description_format": fabric.node_description_format,
            "expected_speed": fabric.expected_speed,
            "expected_width": fabric.expected_width,
            "expected_rate_gbps": fabric.expected_rate_gbps,
            "sharp": fabric.sharp,
        },
        "cluster_compute_hcas": compute_hcas,
        # Per node profile (each GPU host's `node_profile`): the compute HCAs by PCI address,
        # the one identity a renamed device keeps, and the ports that are not compute, so a role
        # checks the HCAs it expects and only lists the rest (a DGX H100 shows twelve).
        "cluster_node_profiles": {
            name: {
                "compute_hcas": [
                    {"device": h.device, "pci": h.pci, "rail": h.rail} for h in p.compute_hcas
                ],
                "nics": [{"device": n.device, "pci": n.pci, "purpose": n.purpose} for n in p.nics],
            }
            for name, p in cluster.gpu_profiles().items()
        },
        "cluster_cabling_csv": "{{ inventory_dir }}/cabling.csv",
        "cluster_switch_links_csv": "{{ inventory_dir }}/switch-links.csv",
        "cluster_thresholds": cluster.thresholds.model_dump(mode="json"),
        "nvidia_driver_branch": software.nvidia_driver_branch,
        "nvidia_driver_version": software.nvidia_driver_version,
        "cuda_version": software.cuda_version,
        "doca_ofed_version": software.doca_ofed_version,
        "nccl_version": software.nccl_version,
        "nccl_env": nccl_env,
        "nccl_conf_file": "{{ inventory_dir }}/nccl.conf",
        "sharp_enabled": fabric.sharp,
        "sharp_hpcx_version": software.hpcx_version,
        "sharp_plugin_version": software.sharp_plugin_version,
        "slurm_package_source": slurm.packages,
        "slurm_uid": slurm.uid,
        "slurm_gid": slurm.gid,
        "slurm_cluster_name": cluster.slurm_cluster_name,
        "slurm_partitions": partitions,
        "slurm_nodes_conf_file": "{{ inventory_dir }}/slurm/nodes.conf",
        "slurm_gres_conf_file": "{{ inventory_dir }}/slurm/gres.conf",
        "slurm_topology_conf_file": "{{ inventory_dir }}/slurm/topology.conf",
        "slurm_health_check_enabled": slurm.health_check_interval > 0,
        "slurm_health_check_interval": slurm.health_check_interval,
        "slurm_health_check_node_state": ",".join(slurm.health_check_node_state),
        "slurm_unkillable_step_timeout": slurm.unkillable_step_timeout,
        "dcgm_version": software.dcgm_version,
        "dcgm_exporter_version": software.dcgm_exporter_version,
        "nccl_tests_version": software.nccl_tests_version,
        "nccl_tests_repo_url": repos.nccl_tests,
        "nccl_tests_binary_dir": cluster.nccl.tests.binary_dir,
        "nccl_tests_jobs_dir": "{{ inventory_dir }}/nccl-tests",
        "enroot_download_url": repos.enroot,
        "pyxis_repo_url": repos.pyxis,
    }
    # The dcgm role installs the packages of the pinned release's major (4:
    # datacenter-gpu-manager-4-*); its own check refuses a version that is not 3.x or 4.x.
    dcgm_major = software.dcgm_version.split(".")[0]
    if dcgm_major.isdigit():
        group_vars["dcgm_major"] = int(dcgm_major)
    group_vars.update(_storage_vars(cluster))
    if fabric.ufm_url is not None:
        group_vars["cluster_ufm_url"] = fabric.ufm_url
    if software.slurm_version is not None:
        group_vars["slurm_version"] = software.slurm_version
    if slurm.repository is not None:
        group_vars["slurm_site_repo_uri"] = slurm.repository.url
        group_vars["slurm_site_repo_suites"] = list(slurm.repository.suites)
        group_vars["slurm_site_repo_components"] = list(slurm.repository.components)
        if slurm.repository.key_url is not None:
            group_vars["slurm_site_repo_signed_by"] = slurm.repository.key_url
    # Per-OS repositories reach the roles only when the spec names a mirror: otherwise every
    # node gets its own OS release's repository from the role defaults.
    for name, url in (
        ("cuda_repo_url", repos.cuda),
        ("doca_ofed_repo_url", repos.doca),
        ("sharp_hpcx_url", repos.hpcx),
    ):
        if url is not None:
            group_vars[name] = url
    # The site's NTP servers, for the common role's time server (its default: none, no pool).
    if cluster.management.time_servers:
        group_vars["common_timesync_upstream_servers"] = [
            str(server) for server in cluster.management.time_servers
        ]
    # Spec values reach Ansible as data; only the paths below the inventory are templates.
    group_vars = {
        key: value if key in TEMPLATED_VARS else mark_unsafe(value)
        for key, value in group_vars.items()
    }
    # The spec's free-form variables win, as written (Ansible templates them): a lab points
    # repository URLs at its mirror, a site refers to its vault.
    group_vars.update(cluster.ansible_vars)
    group_vars.update(cluster.ansible_connection_vars)
    # What the roles write into chrony.conf, slurm.conf and systemd units meets that grammar too.
    try:
        guards.check_role_variables(group_vars)
    except guards.UnsafeValue as exc:
        raise RenderError(str(exc)) from None

    node_lines = []
    for name, run in _runs(gpu_nodes, lambda n: n.profile_name):
        p = cluster.profile(name)
        node_lines.append(
            {
                "nodes": _fold([n.name for n in run]),
                "profile": name,
                "p": p,
                "gres": f"gpu:{p.gpu_model}:{p.gpu_count}",
                "gres_lines": _gres_lines(p),
            }
        )
    su_switches = []
    for su in range(1, cluster.su_count + 1):
        members = [n.name for n in gpu_nodes if n.su == su]
        if members:  # an adopted fabric's SUs keep their site numbers, with gaps between
            su_switches.append({"name": f"su{su}", "nodes": _fold(members)})

    return {
        "header": HEADER,
        "cluster": cluster,
        "inventory_hosts": inventory_hosts,
        "inventory_groups": inventory_groups,
        "group_vars": group_vars,
        "node_lines": node_lines,
        "partitions": partitions,
        "su_switches": su_switches,
        "spine_switch": "spines",
        "nccl_env": nccl_env,
        "tests": cluster.nccl.tests,
        "partition": next((p["name"] for p in partitions if p["default"]), partitions[0]["name"])
        if partitions
        else "",
        "gpus_per_node": profile.gpu_count if profile else 8,
        "time_limit_min": max(1, -(-cluster.thresholds.nccl_gate.watchdog_s // 60)),
    }
