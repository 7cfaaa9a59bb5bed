"""`lab up` / `lab down` / `lab status`: bring the emulated cluster up, report it, tear it down.

`up` is all-or-nothing: any failure tears down what it built before the error surfaces.
A second `up` on a running lab changes nothing; an `up` after a crash cleans up first.
`down` removes every namespace, link, cgroup and process this lab created, and nothing else.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cluster_lab import bmc, fabric, flavours, nodes, releases, repo, schedmd, ufm
from cluster_lab import model as hw
from cluster_lab.base import ensure_base, ensure_layer
from cluster_lab.config import DEFAULT_SPEC, LabConfig
from cluster_lab.faults import operator_view
from cluster_lab.host import (
    LabError,
    ProcRef,
    require_host_features,
    require_root,
    run,
    spawn,
    stop_process,
)
from cluster_lab.hostview import write_host_views
from cluster_lab.sim.packages import publish_to_lab_repo
from cluster_lab.state import LabState, load_state, running_lab, save_state
from cluster_lab.topology import LabPlan, build_model, load_plan
from cluster_tool.ansible.runner import forget_facts
from cluster_tool.errors import UsageError

# Packages the head node boots with (a cached layer): the subnet manager lives outside it, so the
# real diags (and the umad2sim preload that aims them at ibsim) come with the lab.
HEAD_FABRIC_PACKAGES = ("infiniband-diags", "ibsim-utils")
# The lab's Ansible variables, written into its rendered inventory's group_vars.
LAB_GROUP_VARS = Path(__file__).with_name("data") / "group_vars.yml"
BOOT_TIMEOUT = 60.0


# --- results -------------------------------------------------------------------------------


@dataclass
class NodeStatus:
    name: str
    address: str
    role: str
    running: bool
    power_state: str
    bmc_address: str | None = None
    memory_bytes: int | None = None


@dataclass
class LabStatus:
    running: bool
    lab_dir: str
    already_running: bool = False
    spec: str = ""
    ssh_config: str = ""
    inventory: str = ""
    repo_url: str = ""
    shared_dir: str = ""
    redfish: dict[str, str] = field(default_factory=dict)
    nodes: list[NodeStatus] = field(default_factory=list)
    services: dict[str, bool] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)
    elapsed_s: float | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "already_running": self.already_running,
            "lab_dir": self.lab_dir,
            "spec": self.spec,
            "ssh_config": self.ssh_config,
            "inventory": self.inventory,
            "repo_url": self.repo_url,
            "shared_dir": self.shared_dir,
            "redfish": self.redfish,
            "nodes": [vars(n) for n in self.nodes],
            "services": self.services,
            "faults": self.faults,
            "elapsed_s": self.elapsed_s,
            "timings": self.timings,
        }


# --- locking --------------------------------------------------------------------------------


@contextlib.contextmanager
def lab_lock(config: LabConfig) -> Iterator[None]:
    """One writer of a lab's host objects at a time (CLI, tests, the BMC agent)."""
    config.lab_dir.mkdir(parents=True, exist_ok=True)
    with open(config.lab_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# --- up ---------------------------------------------------------------------------------------


def up(config: LabConfig, spec_path: Path | None = None) -> LabStatus:
    """Bring the lab up (head + GPU nodes, repository, fabric, BMCs); see the module doc."""
    require_root()
    require_host_features()
    spec_path = Path(spec_path or DEFAULT_SPEC)
    if not spec_path.is_file():
        raise UsageError(f"{spec_path}: no such lab spec")
    started = time.monotonic()
    with lab_lock(config):
        state = load_state(config.state_file)
        if state is not None and state.complete and _all_alive(state):
            result = _status(config, state)
            result.already_running = True
            return result
        # A record that is incomplete or has dead processes is a crashed lab.
        _teardown(config, state)
        _check_addresses_free(config)
        plan = load_plan(spec_path, config.inventory_dir)
        _check_plan(config, plan)
        base = ensure_base(config)
        repo.ensure_repo(config, base)
        # SchedMD's Slurm packages, as a site builds them, for `slurm.packages: schedmd`.
        schedmd.publish_schedmd(config)
        # The device simulators go in under the vendors' package names and versions, so
        # the roles install them exactly as they would the real ones.
        publish_to_lab_repo(config)
        # What a cluster downloads from GitHub releases and a registry (enroot, pyxis, an image).
        releases.publish_releases(config)
        head_layer = ensure_layer(config, base, "head-fabric", HEAD_FABRIC_PACKAGES)
        # Nodes of another OS than the base's (the spec's `os`): its archive and image layer.
        os_layers = {}
        for flavour in _flavours(plan).values():
            flavours.publish_flavour(config, flavour)
            os_layers[flavour.name] = str(flavours.ensure_layer(config, base, flavour))
        try:
            state = _build(config, plan, base, head_layer, os_layers)
        except BaseException:
            _teardown(config, load_state(config.state_file))
            raise
        result = _status(config, state)
        result.elapsed_s = round(time.monotonic() - started, 2)
        return result


def _flavours(plan: LabPlan) -> dict[str, flavours.Flavour]:
    """The flavours the plan's nodes run (by the spec's `os`)."""
    found: dict[str, flavours.Flavour] = {}
    for host in plan.hosts:
        flavour = flavours.flavour_of(host.os)
        if flavour is not None:
            found[flavour.name] = flavour
    return found


def _build(
    config: LabConfig,
    plan: LabPlan,
    base: Path,
    head_layer: Path,
    os_layers: dict[str, str] | None = None,
) -> LabState:
    lab_name = f"{plan.cluster.name}-{config.prefix}"
    state = LabState(
        prefix=config.prefix,
        bridge=config.bridge,
        subnet=str(config.subnet),
        lab_dir=str(config.lab_dir),
        spec=str(plan.spec_path.resolve()),
        base=str(base),
        hierarchies=nodes.host_cgroup_hierarchies(config.cgroup_name),
    )
    state.extra["lab_name"] = lab_name
    state.extra["head_layer"] = str(head_layer)
    state.extra["os_layers"] = dict(os_layers or {})
    timings: dict[str, float] = {}
    state.extra["timings"] = timings
    mark = time.monotonic()

    def lap(stage: str) -> None:
        nonlocal mark
        now = time.monotonic()
        timings[stage] = round(now - mark, 2)
        mark = now

    save_state(config.state_file, state)
    config.log_dir.mkdir(parents=True, exist_ok=True)
    # The nodes boot bare, perhaps as another OS than a lab of the same inventory had: what
    # Ansible cached about them is stale (as after a re-image).
    forget_facts(config.inventory_dir, [host.name for host in plan.hosts])

    nodes.ensure_bridge(config)

    model = hw.save(config.model_dir, build_model(plan, lab_name))
    config.shared_dir.mkdir(parents=True, exist_ok=True)
    _fresh_steps_dir(config)
    _write_fake_sysfs(config, model)
    write_host_views(model, config.nodes_dir)
    _write_ssh_files(config, plan)
    _render_lab_inventory(config, plan)

    for host in plan.hosts:
        if host.bmc_address:
            ref = bmc.start_emulator(config, lab_name, host.name, host.address, host.bmc_address)
            state.services[f"bmc-{host.name}"] = ref.to_json()
            save_state(config.state_file, state)
    if any(h.bmc_address for h in plan.hosts):
        state.services["agent"] = _start_agent(config).to_json()
        save_state(config.state_file, state)
    lap("bridge, model, inventory, BMC emulators")

    state.services["repo"] = repo.start_server(config).to_json()
    save_state(config.state_file, state)
    # The UFM stand-in (mode `ufm` asks it); its credentials are the lab's, in its context.
    import secrets as token

    ufm_credentials = {
        ufm.USER_ENV: f"lab-ufm-{token.token_hex(3)}",
        ufm.PASSWORD_ENV: token.token_urlsafe(18),
    }
    state.services["ufm"] = ufm.start(config, ufm_credentials, plan.cluster.fabric.sharp).to_json()
    save_state(config.state_file, state)

    nodes.add_netns(config, fabric.FABRIC_NS, config.ibsim_address)
    state.netns.append(fabric.FABRIC_NS)
    save_state(config.state_file, state)
    lap("repository server")
    state.services["ibsim"] = fabric.start(config, model).to_json()
    save_state(config.state_file, state)
    lap("fabric (ibsim)")

    for host in plan.hosts:
        nodes.add_netns(config, host.name, host.address)
        state.netns.append(host.name)
        save_state(config.state_file, state)
        supervisor = nodes.start_node(
            config, node_spec(config, plan, host.name), _lower(state, plan, host.name), _h(state)
        )
        state.nodes[host.name] = supervisor.to_json()
        save_state(config.state_file, state)
    for host in plan.hosts:
        log = config.log_dir / f"node-{host.name}.log"
        nodes.wait_ssh(host.address, BOOT_TIMEOUT, state.node_ref(host.name), log)
    lap("nodes booted, sshd up")

    # The subnet manager is the spec's (the opensm role's on a converge); the unconverged lab
    # gets the same installed service started now, so its fabric is swept before any converge.
    head = _head(plan)
    if head is not None:
        state.extra["subnet_manager"] = head
        save_state(config.state_file, state)
        fabric.start_subnet_manager(_on(config, head), install=True)
        lap("subnet manager (the head's OpenSM service, swept)")

    if any(h.bmc_address for h in plan.hosts):
        for host in plan.hosts:
            if host.bmc_address:
                _wait_bmc(host.bmc_address, lab_name, host.name)
    lap("BMCs answering")

    written = _write_context(config, plan, ufm_credentials)
    if written is not None:
        state.extra["context"] = str(written)
    state.complete = True
    save_state(config.state_file, state)
    return state


_LAB_WRITER = re.compile(r"cluster-tool lab up \((.+)\)")


def _written_by(config: LabConfig) -> str:
    return f"cluster-tool lab up ({config.lab_dir})"


def _write_context(
    config: LabConfig, plan: LabPlan, extra_env: dict[str, str] | None = None
) -> Path | None:
    """The lab is a cluster like any other: its context says how workflows reach it (the lab's
    inventory, SSH config, Slurm controller, shared folder for the gate, its BMC emulators'
    plain http) and holds the lab-only secrets generated here (slurmdbd password, the BMC
    credentials the spec's {env: ...} names), so `cluster-tool bringup examples/lab.yml`
    needs nothing more. A context someone else wrote for this cluster name (an operator, or
    another lab still up: a molecule scenario's beside the test lab) is left as it is: None."""
    import secrets as token

    from cluster_tool.context import SiteContext, load_context, save_context

    cluster = plan.cluster
    try:
        existing = load_context(cluster.name)
    except UsageError:
        existing = None  # unreadable or not ours to trust: replaced by this lab's
    if existing is not None and existing.written_by != _written_by(config):
        other = _LAB_WRITER.fullmatch(existing.written_by)
        if other is None or (Path(other.group(1)) / "state.json").exists():
            return None
    env = {"CLUSTER_TOOL_SLURMDBD_PASSWORD": token.token_urlsafe(18), **(extra_env or {})}
    creds = cluster.bmc.credentials
    if creds.username.env:
        env[creds.username.env] = f"lab-admin-{token.token_hex(3)}"
    if creds.password.env:
        env[creds.password.env] = token.token_urlsafe(18)
    return save_context(
        SiteContext(
            cluster=cluster.name,
            inventory=str(config.inventory_dir),
            ssh_config=str(config.ssh_config),
            slurm_via=cluster.slurm.controller,
            gate_workdir=str(config.shared_dir),
            bmc_insecure=True,
            bmc_scheme="http",
            env=env,
            written_by=_written_by(config),
        )
    )


def _remove_context(config: LabConfig, state: LabState) -> bool:
    """Remove the context this lab wrote (not one an operator or another lab wrote since)."""
    from cluster_tool.context import remove_context

    path = Path(str(state.extra.get("context") or ""))
    if not path.name:
        return False
    return remove_context(path.stem, _written_by(config), path=path)


def _write_fake_sysfs(config: LabConfig, model: hw.HardwareModel) -> None:
    """Each node's fake /sys/class (HCAs for the real ibstat), mounted at its boot (part 2)."""
    try:
        from cluster_lab.sim.sysfs import write_all_sysfs_trees
    except ImportError:  # a checkout without the device simulators: nodes without HCAs
        return
    write_all_sysfs_trees(model.model_dump(mode="json"), config.nodes_dir)


def _lower(state: LabState, plan: LabPlan, name: str) -> str:
    """The node's overlay lower layers: the base, on the head its fabric-tools layer, and on a
    node of another OS that OS's layer (its identity and preinstalled packages)."""
    layers = [state.base]
    os_layer = dict(state.extra.get("os_layers") or {}).get(str(plan.host(name).os))
    if os_layer:
        layers.insert(0, os_layer)
    layer = state.extra.get("head_layer")
    if name == _head(plan) and layer:
        layers.insert(0, layer)
    return ":".join(layers)


def _h(state: LabState) -> list[nodes.CgroupHierarchy]:
    return list(state.hierarchies)


def _head(plan: LabPlan) -> str | None:
    subnet_manager = plan.cluster.fabric.subnet_manager
    names = [h.name for h in plan.hosts]
    if subnet_manager in names:
        return subnet_manager
    heads = [h.name for h in plan.hosts if h.role == "head"]
    return heads[0] if heads else None


def _wait_bmc(bmc_address: str, lab_name: str, node: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            bmc.get_system(bmc_address, lab_name, node, timeout=1)
            return
        except LabError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _start_agent(config: LabConfig) -> ProcRef:
    import sys

    return spawn(
        [sys.executable, "-m", "cluster_lab.agent", json.dumps(config_to_json(config))],
        log=config.log_dir / "agent.log",
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )


def config_to_json(config: LabConfig) -> dict[str, Any]:
    return {
        "lab_dir": str(config.lab_dir),
        "cache_dir": str(config.cache_dir),
        "bridge": config.bridge,
        "prefix": config.prefix,
        "subnet": str(config.subnet),
        "repo_port": config.repo_port,
        "redfish_port": config.redfish_port,
        "agent_port": config.agent_port,
        "ufm_port": config.ufm_port,
    }


def config_from_json(data: dict[str, Any]) -> LabConfig:
    return LabConfig(
        lab_dir=Path(data["lab_dir"]),
        cache_dir=Path(data["cache_dir"]),
        bridge=data["bridge"],
        prefix=data["prefix"],
        subnet=ipaddress.IPv4Network(data["subnet"]),
        repo_port=int(data["repo_port"]),
        redfish_port=int(data["redfish_port"]),
        agent_port=int(data["agent_port"]),
        # A lab recorded before the UFM stand-in: its default port.
        ufm_port=int(data.get("ufm_port", LabConfig.ufm_port)),
    )


def node_spec(config: LabConfig, plan: LabPlan, name: str) -> nodes.NodeSpec:
    host = plan.host(name)
    flavour = flavours.flavour_of(host.os)
    hosts_lines = ["127.0.0.1\tlocalhost", f"{config.host_address}\tlab-repo"]
    domain = plan.cluster.management.domain
    for h in plan.hosts:
        names = f"{h.name}.{domain}\t{h.name}" if domain else h.name
        hosts_lines.append(f"{h.address}\t{names}")
    extra: dict[str, tuple[str, int]] = {}
    if name == _head(plan):
        current = hw.load(config.model_dir)
        for tool in fabric.DIAGS:
            extra[f"usr/local/sbin/{tool}"] = (fabric.diag_wrapper(config, current, tool), 0o755)
        extra[fabric.SM_ENV_FILE] = (fabric.sm_environment(config, current), 0o644)
    return nodes.NodeSpec(
        name=host.name,
        address=host.address,
        hosts_file="\n".join(hosts_lines) + "\n",
        authorized_key=config.ssh_key.with_suffix(".pub").read_text(),
        apt_source=flavour.apt_source(config.repo_url) if flavour else repo.apt_source_line(config),
        extra_files=extra,
    )


# --- checks ------------------------------------------------------------------------------------


def _check_plan(config: LabConfig, plan: LabPlan) -> None:
    for host in plan.hosts:
        try:
            flavours.flavour_of(host.os)
        except LabError as exc:
            raise UsageError(f"{plan.spec_path}: {host.name}: {exc}") from exc
    reserved = {config.host_address, config.ibsim_address, config.bmc_address}
    seen: set[str] = set()
    for host in plan.hosts:
        address = ipaddress.IPv4Address(host.address)
        if address not in config.subnet:
            raise UsageError(
                f"{plan.spec_path}: {host.name} {host.address} is outside the lab subnet "
                f"{config.subnet} (set CLUSTER_TOOL_LAB_SUBNET)"
            )
        if host.address in reserved:
            raise UsageError(
                f"{plan.spec_path}: {host.name} {host.address} is reserved by the lab "
                f"(host {config.host_address}, fabric {config.ibsim_address}, "
                f"BMC {config.bmc_address})"
            )
        if host.address in seen:
            raise UsageError(f"{plan.spec_path}: address {host.address} used twice")
        seen.add(host.address)
        if host.bmc_address:
            bmc_host, _port = bmc.split_address(host.bmc_address)
            if bmc_host != config.host_address:
                raise UsageError(
                    f"{plan.spec_path}: {host.name} BMC {host.bmc_address}: the lab serves "
                    f"every BMC on the bridge address {config.host_address}"
                )


def _check_addresses_free(config: LabConfig) -> None:
    """Fail before building anything when the bridge, subnet or prefix is taken."""
    if Path("/sys/class/net", config.bridge).exists():
        raise UsageError(f"network interface {config.bridge} already exists (another lab?)")
    out = run(["ip", "-4", "-o", "addr", "show"]).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        iface, cidr = parts[1], parts[3]
        try:
            interface = ipaddress.IPv4Interface(cidr)
        except ValueError:
            continue
        network = interface.network
        if interface.ip in config.subnet or (
            network.overlaps(config.subnet) and network.prefixlen >= config.subnet.prefixlen
        ):
            raise UsageError(f"address range {config.subnet} is already in use on {iface} ({cidr})")
    routes = run(["ip", "-4", "route", "show"]).stdout
    for line in routes.splitlines():
        dest = line.split()[0] if line.split() else ""
        if dest in ("default", ""):
            continue
        try:
            network = ipaddress.IPv4Network(dest, strict=False)
        except ValueError:
            continue
        # A wider route (a VPC's 10.0.0.0/8) is shadowed by the lab's own; an equal or
        # narrower one means something else already uses these addresses.
        if network.overlaps(config.subnet) and network.prefixlen >= config.subnet.prefixlen:
            raise UsageError(f"address range {config.subnet} overlaps the route {line.strip()}")
    for port in (config.repo_port, config.agent_port, config.ufm_port):
        if _listening(config.host_address, port):
            raise UsageError(
                f"{config.host_address}:{port} is already in use by another process "
                "(a lab that crashed with its state lost?)"
            )
    taken = [ns for ns in _prefixed_netns(config)]
    if taken:
        raise UsageError(f"network namespaces {', '.join(taken)} already exist (another lab?)")


def _listening(address: str, port: int) -> bool:
    """A TCP listener on address:port, even when the address is on no interface any more."""
    want = (
        f"{int(ipaddress.IPv4Address(address)).to_bytes(4, 'big')[::-1].hex().upper()}:{port:04X}"
    )
    try:
        table = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return False
    return any(row.split()[1] == want and row.split()[3] == "0A" for row in table if row.strip())


def _prefixed_netns(config: LabConfig) -> list[str]:
    netns_dir = Path("/run/netns")
    if not netns_dir.is_dir():
        return []
    return sorted(p.name for p in netns_dir.iterdir() if p.name.startswith(config.netns_prefix))


# --- SSH and inventory --------------------------------------------------------------------------


def _write_ssh_files(config: LabConfig, plan: LabPlan) -> None:
    config.ssh_dir.mkdir(parents=True, exist_ok=True)
    config.ssh_dir.chmod(0o700)
    config.control_dir.mkdir(parents=True, exist_ok=True)
    config.control_dir.chmod(0o700)
    if not config.ssh_key.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "cluster-tool-lab",
             "-f", str(config.ssh_key)])  # fmt: skip
    blocks = [
        "# Written by `cluster-tool lab up`: reach lab nodes by name with `ssh -F <this file>`.",
        "",
    ]
    for host in plan.hosts:
        blocks += [f"Host {host.name} {host.address}", f"    HostName {host.address}", ""]
    patterns = " ".join(f"{h.name} {h.address}" for h in plan.hosts)
    blocks += [
        f"Host {patterns}",
        "    User root",
        f"    IdentityFile {config.ssh_key}",
        "    IdentitiesOnly yes",
        # Re-imaged nodes come back with the base's host keys; the lab is the truth.
        "    StrictHostKeyChecking no",
        "    UserKnownHostsFile /dev/null",
        "    LogLevel ERROR",
        "    ControlMaster auto",
        f"    ControlPath {config.control_dir}/%C",
        "    ControlPersist 120s",
        "    ConnectTimeout 10",
        "",
    ]
    config.ssh_config.write_text("\n".join(blocks))


def _render_lab_inventory(config: LabConfig, plan: LabPlan) -> None:
    """Re-render the inventory with lab group_vars: repositories at the lab's, SSH via the lab."""
    from cluster_tool.render import render
    from cluster_tool.render.engine import load_rendered_yaml, render_files

    current = load_rendered_yaml(render_files(plan.cluster).get("group_vars/all.yml", "")) or {}
    lab_vars: dict[str, Any] = {}
    # The per-OS repositories are rendered only when the spec sets them; the lab serves them all.
    for key in [*current, "cuda_repo_url", "doca_ofed_repo_url"]:
        if key.endswith(("_repo_url", "_repo_uri")):
            lab_vars[key] = f"{config.repo_url}/"
    # What the lab's nodes need beyond a real cluster's settings (no boot loader, a flat
    # repository, Slurm without cgroups): its variables, in its own inventory.
    lab_vars.update(yaml.safe_load(LAB_GROUP_VARS.read_text()))
    lab_vars.update(
        {
            "lab_repo_url": f"{config.repo_url}/",
            # enroot's release .debs and pyxis' tag tarball, as GitHub lays them out.
            "enroot_download_url": f"{config.repo_url}/releases/enroot/",
            "pyxis_repo_url": f"{config.repo_url}/releases/pyxis.git",
            "lab_apt_source": repo.apt_source_line(config),
            # Same path on this machine and in every node (the gate's --workdir goes below it).
            "lab_shared_dir": str(config.shared_dir),
            # The opensm role installs the distribution's OpenSM on the spec's subnet manager and
            # the lab's service that runs it against ibsim (cluster_lab/fabric.py).
            "opensm_extra_packages": [fabric.SM_SERVICE],
            "opensm_service": fabric.SM_SERVICE,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(config.ssh_key),
            "ansible_ssh_common_args": f"-F {config.ssh_config}",
            "ansible_control_path_dir": str(config.control_dir),
        }
    )
    if plan.cluster.fabric.subnet_manager_mode == "ufm":
        # The lab's UFM is its stand-in on the bridge.
        lab_vars["cluster_ufm_url"] = config.ufm_url
    cluster = plan.cluster.model_copy(
        update={"ansible_vars": {**plan.cluster.ansible_vars, **lab_vars}}
    )
    render(cluster, config.inventory_dir)
    # A node of another OS takes every repository from that OS's archive in the lab's repository
    # (the render's os_<name> group), as a site's per-OS mirrors.
    for flavour in _flavours(plan).values():
        url = f"{config.repo_url}/{flavour.path}/"
        os_vars = {
            key: url
            for key, value in lab_vars.items()
            if key.endswith(("_repo_url", "_repo_uri"))
            and key != "lab_repo_url"
            and value == f"{config.repo_url}/"
        }
        os_vars["lab_apt_source"] = flavour.apt_source(config.repo_url)
        path = config.inventory_dir / "group_vars" / f"os_{flavour.name}.yml"
        path.write_text(
            "---\n# Written by `cluster-tool lab up`: this OS's archive in the lab's repository.\n"
            + yaml.safe_dump(os_vars, sort_keys=True)
        )


# --- running commands on nodes -----------------------------------------------------------------


def ssh_argv(config: LabConfig, node: str, command: list[str] | None = None) -> list[str]:
    """The ssh command line that reaches a lab node by name (a shell when `command` is empty)."""
    argv = ["ssh", "-F", str(config.ssh_config)]
    if not command:
        argv.append("-t")
    argv.append(node)
    return argv + list(command or [])


def _on(config: LabConfig, node: str) -> fabric.Runner:
    """A shell-command runner on `node` that never raises (the caller reads the exit code)."""

    def run_there(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ssh_argv(config, node, [command]),
            capture_output=True,
            text=True,
            timeout=fabric.SM_TIMEOUT + 120,
            check=False,
        )

    return run_there


def ssh_run(
    config: LabConfig, node: str, command: str, *, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run a shell command on a node; LabError (with its stderr) when it fails."""
    return run(ssh_argv(config, node, [command]), timeout=timeout)


def close_ssh_masters(config: LabConfig) -> None:
    """Close ControlPersist masters so nothing keeps talking to a torn-down lab."""
    if not config.control_dir.is_dir():
        return
    for sock in config.control_dir.iterdir():
        run(
            ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "lab-node"],
            check=False,
            timeout=10,
        )
        with contextlib.suppress(OSError):
            sock.unlink()


# --- power (used by the BMC agent) ---------------------------------------------------------------


def power_off_node(config: LabConfig, name: str) -> None:
    with lab_lock(config):
        state = _require_state(config)
        ref = state.node_ref(name)
        if ref is not None:
            nodes.stop_node(ref)
        for h in state.hierarchies:
            nodes.kill_cgroup(Path(h.lab_path) / name)
        state.nodes.pop(name, None)
        save_state(config.state_file, state)
        hw.update(config.model_dir, lambda m: setattr(m.node(name), "power_state", "Off"))
    _count_link_down(config, name)


def _count_link_down(config: LabConfig, name: str) -> None:
    """The node's links went down with it: both ends of each of its cables count one more
    LinkDowned, in the model and in ibsim, as real hardware does (issue 18: the trap a plain
    `validate --fabric` after a maintenance falls into when it judges that count as an error)."""
    saved = hw.update(config.model_dir, lambda m: fabric.count_power_cycle(m.node(name)))
    for hca in saved.node(name).hcas:
        # ibsim not running (the lab going down): the model keeps the count for its replay.
        with contextlib.suppress(LabError):
            fabric.set_link_downed(config, name, hca, time.time())


def power_on_node(config: LabConfig, name: str, *, reimage: bool = False) -> None:
    """Boot a stopped node; with `reimage`, from a wiped overlay (bare, as after a PXE install)."""
    with lab_lock(config):
        state = _require_state(config)
        ref = state.node_ref(name)
        if ref is not None and ref.alive():
            return
        plan = load_plan(Path(state.spec), config.inventory_dir.with_name("inventory.agent"))
        if reimage:
            nodes.wipe_upper(config, name)
        supervisor = nodes.start_node(
            config, node_spec(config, plan, name), _lower(state, plan, name), _h(state)
        )
        state.nodes[name] = supervisor.to_json()
        save_state(config.state_file, state)
        hw.update(config.model_dir, lambda m: setattr(m.node(name), "power_state", "On"))
        log = config.log_dir / f"node-{name}.log"
        nodes.wait_ssh(plan.host(name).address, BOOT_TIMEOUT, supervisor, log)


# --- the fabric after a model change --------------------------------------------------------------


def restart_fabric(config: LabConfig) -> None:
    """Rebuild ibsim's net file from the current hardware model and restart ibsim + OpenSM.

    For changes a console command cannot make (re-cabling to another leaf, a degraded
    width/speed, an HCA gone); cuts and restores go live with `fabric.unlink_hca` etc.
    Takes about a second; diags on the head reconnect on their next run.
    """
    with lab_lock(config):
        state = _require_state(config)
        # The head's OpenSM goes first and comes back against the new ibsim.
        head = state.extra.get("subnet_manager")
        had_sm = bool(head) and fabric.stop_subnet_manager(_on(config, str(head)))
        for name in ("opensm", "ibsim"):
            ref = state.service_ref(name)
            if ref is not None:
                stop_process(ref)
        state.services.pop("opensm", None)
        state.services["ibsim"] = fabric.start(config, hw.load(config.model_dir)).to_json()
        save_state(config.state_file, state)
        if had_sm:
            fabric.start_subnet_manager(_on(config, str(head)), install=False)


def _require_state(config: LabConfig) -> LabState:
    state = load_state(config.state_file)
    if state is None:
        raise UsageError(f"no lab is running in {config.lab_dir}")
    return state


# --- status -------------------------------------------------------------------------------------


def status(config: LabConfig) -> LabStatus:
    config = running_lab(config)
    state = load_state(config.state_file)
    if state is None:
        return LabStatus(running=False, lab_dir=str(config.lab_dir))
    return _status(config, state)


def _all_alive(state: LabState) -> bool:
    refs = [ProcRef.from_json(v) for v in state.services.values()]
    refs += [ProcRef.from_json(v) for v in state.nodes.values()]
    return bool(refs) and all(r.alive() for r in refs)


def _status(config: LabConfig, state: LabState) -> LabStatus:
    try:
        current: hw.HardwareModel | None = hw.load(config.model_dir)
    except UsageError:
        current = None
    result = LabStatus(
        running=state.complete and _all_alive(state),
        lab_dir=str(config.lab_dir),
        spec=state.spec,
        ssh_config=str(config.ssh_config),
        inventory=str(config.inventory_dir),
        repo_url=f"{config.repo_url}/",
        shared_dir=str(config.shared_dir),
        timings=dict(state.extra.get("timings", {})),
    )
    result.services = {
        name: ProcRef.from_json(ref).alive() for name, ref in sorted(state.services.items())
    }
    if current is not None:
        lab_name = current.lab
        for node in current.nodes:
            ref = state.node_ref(node.name)
            result.nodes.append(
                NodeStatus(
                    name=node.name,
                    address=node.address,
                    role=node.role,
                    running=ref is not None and ref.alive(),
                    power_state=node.power_state,
                    bmc_address=node.bmc_address,
                    memory_bytes=nodes.memory_usage_bytes(list(state.hierarchies), node.name),
                )
            )
            if node.bmc_address:
                result.redfish[node.name] = (
                    f"{bmc.redfish_root(node.bmc_address)}/redfish/v1/Systems/"
                    f"{bmc.system_uuid(lab_name, node.name)}"
                )
        # The operator's view: the record's undo list and model paths are heal's business.
        result.faults = [operator_view(f.model_dump(mode="json")) for f in current.faults]
    return result


# --- down ----------------------------------------------------------------------------------------


def down(config: LabConfig) -> list[str]:
    """Tear the lab down; returns what was removed (empty when nothing was there)."""
    require_root()
    config = running_lab(config)
    with lab_lock(config):
        return _teardown(config, load_state(config.state_file))


def _fresh_steps_dir(config: LabConfig) -> None:
    """An empty steps folder, writable by any job's user (sticky, like /tmp): Slurm's job ids
    start again with a new controller, so no word from an earlier lab may be left."""
    shutil.rmtree(config.steps_dir, ignore_errors=True)
    config.steps_dir.mkdir(parents=True)
    config.steps_dir.chmod(0o1777)


def _teardown(config: LabConfig, state: LabState | None) -> list[str]:
    removed: list[str] = []
    close_ssh_masters(config)
    if state is not None and _remove_context(config, state):
        removed.append(f"context {state.extra['context']}")
    if state is not None:
        # The agent first, so it does not restart nodes while they stop.
        for name in ("agent", *sorted(k for k in state.services if k.startswith("bmc-"))):
            ref = state.service_ref(name)
            if ref is not None and ref.alive():
                stop_process(ref)
                removed.append(f"process {name}")
        for name in list(state.nodes):
            ref = state.node_ref(name)
            if ref is not None and ref.alive():
                nodes.stop_node(ref)
                removed.append(f"node {name}")
        for name in ("opensm", "ibsim", "repo"):
            ref = state.service_ref(name)
            if ref is not None and ref.alive():
                stop_process(ref)
                removed.append(f"process {name}")
        for name, data in state.services.items():
            ref = ProcRef.from_json(data)
            if ref.alive():
                stop_process(ref)
                removed.append(f"process {name}")
    hierarchies = (
        list(state.hierarchies) if state else nodes.host_cgroup_hierarchies(config.cgroup_name)
    )
    for h in hierarchies:
        lab_cgroup = Path(h.lab_path)
        if lab_cgroup.is_dir():
            nodes.kill_cgroup(lab_cgroup)
            nodes.remove_cgroup_tree(lab_cgroup)
            if not lab_cgroup.exists():
                removed.append(f"cgroup {lab_cgroup}")
    names = set(state.netns) if state else set()
    names |= {ns[len(config.netns_prefix) :] for ns in _prefixed_netns(config)}
    for name in sorted(names):
        nodes.remove_netns(config, name)
        removed.append(f"netns {config.netns(name)}")
    if nodes.is_our_bridge(config):
        run(["ip", "link", "del", config.bridge], check=False)
        removed.append(f"bridge {config.bridge}")
    for path in (
        config.nodes_dir,
        config.fabric_dir,
        bmc.bmc_dir(config),
        config.control_dir,
        config.steps_dir,
    ):
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
    if config.state_file.exists():
        config.state_file.unlink()
    return removed
