"""Where a lab lives and what it is called: state dir, cache, bridge, subnet, name prefix, ports.

Everything is configurable (environment or arguments) so that two labs, or a lab and a
test, can run side by side on one machine.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from cluster_tool.errors import UsageError

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = Path("/var/cache/cluster-tool-lab")
DEFAULT_SPEC = REPO_ROOT / "examples" / "lab.yml"


@dataclass(frozen=True)
class LabConfig:
    """The names and places of one lab; two labs on a machine differ in every field."""

    lab_dir: Path = field(default_factory=lambda: REPO_ROOT / ".lab")
    cache_dir: Path = DEFAULT_CACHE
    bridge: str = "ctlab0"
    # Prefix of every host-side name (network namespaces, veths, cgroups): never
    # collides with another lab that uses another prefix.
    prefix: str = "ctl"
    subnet: ipaddress.IPv4Network = field(
        default_factory=lambda: ipaddress.IPv4Network("10.77.0.0/24")
    )
    repo_port: int = 8077
    redfish_port: int = 8000
    agent_port: int = 8078
    # The UFM stand-in's REST endpoint (cluster_lab/ufm.py).
    ufm_port: int = 8079

    def __post_init__(self) -> None:
        if not self.prefix.isalnum() or len(self.prefix) > 6:
            raise UsageError(f"lab prefix {self.prefix!r}: use 1-6 letters or digits")
        if len(self.bridge) > 15:
            raise UsageError(f"bridge name {self.bridge!r} is longer than 15 characters")
        if self.subnet.num_addresses < 16:
            raise UsageError(f"lab subnet {self.subnet} is too small (need at least /28)")

    @classmethod
    def from_env(cls, **overrides: object) -> LabConfig:
        """The config from CLUSTER_TOOL_LAB_* variables, then explicit overrides."""
        env = os.environ
        values: dict[str, object] = {}
        if "CLUSTER_TOOL_LAB_DIR" in env:
            values["lab_dir"] = Path(env["CLUSTER_TOOL_LAB_DIR"])
        if "CLUSTER_TOOL_LAB_CACHE" in env:
            values["cache_dir"] = Path(env["CLUSTER_TOOL_LAB_CACHE"])
        if "CLUSTER_TOOL_LAB_BRIDGE" in env:
            values["bridge"] = env["CLUSTER_TOOL_LAB_BRIDGE"]
        if "CLUSTER_TOOL_LAB_PREFIX" in env:
            values["prefix"] = env["CLUSTER_TOOL_LAB_PREFIX"]
        if "CLUSTER_TOOL_LAB_SUBNET" in env:
            values["subnet"] = _subnet(env["CLUSTER_TOOL_LAB_SUBNET"])
        for key, var in (
            ("repo_port", "CLUSTER_TOOL_LAB_REPO_PORT"),
            ("redfish_port", "CLUSTER_TOOL_LAB_REDFISH_PORT"),
            ("agent_port", "CLUSTER_TOOL_LAB_AGENT_PORT"),
            ("ufm_port", "CLUSTER_TOOL_LAB_UFM_PORT"),
        ):
            if var in env:
                try:
                    values[key] = int(env[var])
                except ValueError as exc:
                    raise UsageError(f"{var}={env[var]!r} is not a port number") from exc
        values.update({k: v for k, v in overrides.items() if v is not None})
        if isinstance(values.get("subnet"), str):
            values["subnet"] = _subnet(str(values["subnet"]))
        return cls(**values)  # type: ignore[arg-type]

    # Host-side addresses on the bridge: .1 the host (repository, agent), the last
    # usable ones the fabric simulator and the BMC service.
    @property
    def host_address(self) -> str:
        return str(self.subnet.network_address + 1)

    @property
    def ibsim_address(self) -> str:
        return str(self.subnet.broadcast_address - 1)

    @property
    def bmc_address(self) -> str:
        return str(self.subnet.broadcast_address - 2)

    @property
    def repo_url(self) -> str:
        return f"http://{self.host_address}:{self.repo_port}"

    @property
    def ufm_url(self) -> str:
        return f"http://{self.host_address}:{self.ufm_port}"

    @property
    def redfish_url(self) -> str:
        return f"http://{self.bmc_address}:{self.redfish_port}"

    @property
    def netns_prefix(self) -> str:
        return f"{self.prefix}-"

    def netns(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def veth(self, name: str) -> str:
        # IFNAMSIZ is 16 with the NUL; keep the node's own name readable at the end.
        return f"{self.prefix}{name}"[:15]

    @property
    def cgroup_name(self) -> str:
        return f"cluster-tool-lab-{self.prefix}"

    # Files of this lab.
    @property
    def state_file(self) -> Path:
        return self.lab_dir / "state.json"

    @property
    def model_dir(self) -> Path:
        return self.lab_dir / "model"

    @property
    def shared_dir(self) -> Path:
        """Bind-mounted read-write at this same path in every node: the lab's shared filesystem."""
        return self.lab_dir / "shared"

    @property
    def steps_dir(self) -> Path:
        """Bind-mounted read-write at /run/lab-steps in every node: where rank 0 of a simulated
        nccl-tests step tells the step's other ranks how they end (cluster_lab/sim/packages.py).
        Emptied at every `lab up` and `lab down`, as a node's /run is at boot."""
        return self.lab_dir / "steps"

    @property
    def nodes_dir(self) -> Path:
        return self.lab_dir / "nodes"

    @property
    def ssh_dir(self) -> Path:
        return self.lab_dir / "ssh"

    @property
    def ssh_config(self) -> Path:
        return self.lab_dir / "ssh_config"

    @property
    def ssh_key(self) -> Path:
        return self.ssh_dir / "id_ed25519"

    @property
    def control_dir(self) -> Path:
        return self.ssh_dir / "cm"

    @property
    def inventory_dir(self) -> Path:
        return self.lab_dir / "inventory"

    @property
    def fabric_dir(self) -> Path:
        return self.lab_dir / "fabric"

    @property
    def log_dir(self) -> Path:
        return self.lab_dir / "logs"

    @property
    def base_dir(self) -> Path:
        return self.cache_dir / "base"

    @property
    def cache_repo_dir(self) -> Path:
        """The Debian packages fetched once for every lab on this machine (`debian/`)."""
        return self.cache_dir / "repo"

    @property
    def repo_dir(self) -> Path:
        """The repository this lab serves: the cached Debian packages (linked) and this lab's
        own simulator packages, so two labs built from two checkouts never share an index."""
        return self.lab_dir / "repo"


def _subnet(text: str) -> ipaddress.IPv4Network:
    try:
        return ipaddress.IPv4Network(text, strict=True)
    except ValueError as exc:
        raise UsageError(f"lab subnet {text!r}: {exc}") from exc
