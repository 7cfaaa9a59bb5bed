"""The cluster spec (`apiVersion: cluster-tool/v1`, `kind: Cluster`) as pydantic v2 models.

Field descriptions document every default; `cluster-tool spec schema` exports them as JSON
schema. Cross-field rules (hosts exist, ports fit, ...) live in `cluster_tool.spec.checks`; the
limits under `thresholds:` in `cluster_tool.spec.thresholds`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PrivateAttr,
    model_validator,
)

from cluster_tool.bounds import HostlistError, HostlistTooLarge
from cluster_tool.bounds import expand_hostlist as bounded_expand
from cluster_tool.spec.base import StrictModel
from cluster_tool.spec.profiles import BUILTIN_PROFILES
from cluster_tool.spec.thresholds import Thresholds

API_VERSION = "cluster-tool/v1"

# Per-lane signalling rate of each InfiniBand generation, in Gb/s (as ibstat reports Rate).
LANE_RATE_GBPS = {"EDR": 25, "HDR": 50, "NDR": 100, "XDR": 200}
WIDTH_LANES = {"1X": 1, "2X": 2, "4X": 4}

# SuperPOD reference architecture: spine switches for 1-4 scalable units (leaves = 8 per SU).
SUPERPOD_SPINES = {1: 4, 2: 8, 3: 16, 4: 16}


def _check_hostlist(value: str) -> str:
    try:
        expand_hostlist(value)
    except (HostlistError, HostlistTooLarge) as exc:
        raise ValueError(str(exc).removeprefix("hostlist: ")) from None
    return value


Hostlist = Annotated[
    str,
    AfterValidator(_check_hostlist),
    Field(description="Slurm-style hostlist, e.g. `gpu[001-032]` or `login[1-2],head`."),
]

PciAddress = Annotated[
    str,
    Field(
        pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$",
        description="PCI address, lower case with domain, e.g. `0000:18:00.0`.",
    ),
]

# RFC 3986 characters less the ones a shell or a template acts on (`$ ; ' ( ) * !` and braces).
Url = Annotated[
    str,
    Field(
        pattern=r"^(https?|file|ftp)://[A-Za-z0-9._~:/?#\[\]@&+,=%-]+$",
        max_length=2048,
        description="Repository or download URL.",
    ),
]


# --- what a spec string may hold ---------------------------------------------------------
# Every string lands somewhere with a grammar of its own (slurm.conf, nccl.conf, a bash
# script, YAML that Ansible templates, a path on the controller), so each says what it may
# hold and a newline, a template marker, `$(`, a backtick, `;` or `../` is a located spec
# error. Only descriptions are free text.


def _matching(what: str, regex: str, max_length: int) -> Any:
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if len(value) > max_length:
            raise ValueError(f"{what} of at most {max_length} characters, not {len(value)}")
        if not compiled.fullmatch(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return AfterValidator(check)


def _schema(regex: str, max_length: int, description: str) -> Any:
    return Field(
        description=description, json_schema_extra={"pattern": regex, "maxLength": max_length}
    )


_HOST_RE = r"[a-z0-9]([a-z0-9-]*[a-z0-9])?"
HostName = Annotated[
    str,
    _matching("a host name (lower-case letters, digits, inner `-`)", _HOST_RE, 63),
    _schema(f"^{_HOST_RE}$", 63, "A host name, e.g. `head01`."),
]

_DOMAIN_RE = (
    r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)
DomainName = Annotated[
    str,
    _matching(
        "a DNS domain (labels of letters, digits, inner `-`, joined by `.`)", _DOMAIN_RE, 253
    ),
    _schema(f"^{_DOMAIN_RE}$", 253, "A DNS domain, e.g. `cluster.example.net`."),
]

# Linux interface names: at most 15 bytes (IFNAMSIZ - 1), no `/`, no whitespace.
_IFNAME_RE = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}"
InterfaceName = Annotated[
    str,
    _matching("an interface name (letters, digits, `_`, `.`, `-`; 15 at most)", _IFNAME_RE, 15),
    _schema(f"^{_IFNAME_RE}$", 15, "A network interface name, e.g. `eno1` or `ibp24s0`."),
]


def _scope_is_an_interface(address: ipaddress.IPv6Address) -> ipaddress.IPv6Address:
    # Python takes any text after `%` as the scope id, line breaks and blanks included
    # (`fe80::1%eth0\nserver 203.0.113.66 iburst` passed): RFC 4007 zones name an interface.
    scope = address.scope_id
    if scope is not None and not re.fullmatch(_IFNAME_RE, scope):
        raise ValueError(f"the zone of an IPv6 address is an interface name, not {scope!r}")
    return address


def _time_server(value: Any) -> str:
    # One check with one message: a union of types reported the IPv4 refusal of an IPv6 value.
    if not isinstance(value, str):
        raise ValueError("a time server is a string: an IPv4 or IPv6 address or a DNS name")
    text = value
    if ":" in text:
        try:
            address = ipaddress.IPv6Address(text)
        except ValueError:
            raise ValueError(f"{text!r} is not an IPv6 address") from None
        return str(_scope_is_an_interface(address))
    if re.fullmatch(r"[0-9.]+", text):
        try:
            return str(ipaddress.IPv4Address(text))
        except ValueError:
            raise ValueError(f"{text!r} is not an IPv4 address") from None
    if len(text) > 253 or not re.fullmatch(_DOMAIN_RE, text):
        raise ValueError(f"{text!r} is not an IPv4 or IPv6 address or a DNS name")
    return text


TimeServer = Annotated[
    str,
    BeforeValidator(_time_server),
    Field(description="An NTP server: IPv4 or IPv6 address (zone: an interface) or DNS name."),
]

# Slurm time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or no limit.
_DURATION_RE = (
    r"INFINITE|UNLIMITED|[0-9]{1,9}(:[0-9]{1,2}){0,2}|[0-9]{1,5}-[0-9]{1,2}(:[0-9]{1,2}){0,2}"
)
SlurmDuration = Annotated[
    str,
    _matching("a Slurm time (`INFINITE`, minutes, `HH:MM:SS`, `D-HH:MM:SS`)", _DURATION_RE, 20),
    _schema(f"^({_DURATION_RE})$", 20, "A Slurm time limit, e.g. `INFINITE` or `7-00:00:00`."),
]

_SLURM_NAME_RE = r"[a-z0-9][a-z0-9_-]*"
SlurmClusterName = Annotated[
    str,
    # Slurm folds ClusterName to lower case and keeps 40 characters of it; the munge key
    # is stored under it on the controller, so it is a path part as well.
    _matching("a Slurm cluster name (lower-case letters, digits, `_`, `-`)", _SLURM_NAME_RE, 40),
    _schema(f"^{_SLURM_NAME_RE}$", 40, "A Slurm `ClusterName`, e.g. `h100-1su`."),
]

# nccl-tests sizes (`-b`, `-e`): a count of bytes with an optional K, M or G.
_BYTES_RE = r"[0-9]{1,15}[KMGkmg]?"
ByteSize = Annotated[
    str,
    _matching("a byte size (digits with an optional K, M or G)", _BYTES_RE, 16),
    _schema(f"^{_BYTES_RE}$", 16, "A size in bytes with an optional K/M/G suffix, e.g. `16G`."),
]

_PATH_RE = r"/([A-Za-z0-9._+-]+/?)*"


def _no_dot_dot(value: str) -> str:
    if ".." in value.split("/"):
        raise ValueError(f"{value!r} has a `..` part; give the path without it")
    return value


AbsolutePath = Annotated[
    str,
    _matching("an absolute path (`/` then letters, digits, `.`, `_`, `+`, `-`)", _PATH_RE, 255),
    AfterValidator(_no_dot_dot),
    _schema(f"^{_PATH_RE}$", 255, "An absolute path without `..`, e.g. `/opt/nccl-tests`."),
]

# Environment names NCCL and the SHARP/UCX plugins read; nothing a loader or shell acts on.
_ENV_NAME_RE = r"(NCCL|SHARP|UCX|HCOLL)_[A-Z0-9_]+"
# A mapping key: pydantic's own pattern check, so the error names what a key must match.
NcclEnvKey = Annotated[str, Field(pattern=f"^{_ENV_NAME_RE}$", max_length=64)]
AnsibleVarName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128)]
# Values as NCCL takes them: `=mlx5_0:1,mlx5_3:1`, `^docker,lo`, `/etc/nccl/topo.xml`, `%h.%p`.
_ENV_VALUE_RE = r"[A-Za-z0-9_.,:=/^+@%-]*"
EnvValue = Annotated[
    str,
    _matching("an environment value (letters, digits, `_.,:=/^+@%-`)", _ENV_VALUE_RE, 255),
    AfterValidator(_no_dot_dot),
    _schema(f"^{_ENV_VALUE_RE}$", 255, "An environment value without spaces or quotes."),
]

# Package versions as apt and git tags write them (`2.21.5-1+cuda12.4`, `v2.13.11`).
_VERSION_RE = r"[A-Za-z0-9][A-Za-z0-9._+~-]*"
Version = Annotated[
    str,
    _matching("a version (letters, digits, `.`, `_`, `+`, `~`, `-`)", _VERSION_RE, 64),
    _schema(f"^{_VERSION_RE}$", 64, "A package version or git tag."),
]

# A name the tool shows or matches (switch model, GPU product as nvidia-smi prints it).
_LABEL_RE = r"[A-Za-z0-9][A-Za-z0-9 ._/+()-]*"
Label = Annotated[
    str,
    _matching("a name (letters, digits, spaces, `._/+()-`)", _LABEL_RE, 128),
    _schema(f"^{_LABEL_RE}$", 128, "A product or model name."),
]

# Python format strings that become switch names or BMC addresses: fields in single braces.
_NAME_PATTERN_RE = r"[A-Za-z0-9_.:-]*(\{[a-z_][a-z0-9_]*(:[0-9]{0,3}d)?\}[A-Za-z0-9_.:-]*)*"
NamePattern = Annotated[
    str,
    _matching(
        "a name pattern (letters, digits, `_.:-` and fields like `{su}` or `{n:02d}`)",
        _NAME_PATTERN_RE,
        128,
    ),
    _schema(f"^{_NAME_PATTERN_RE}$", 128, "A name over format fields, e.g. `su{su}-leaf-r{rail}`."),
]
_BMC_PATTERN_RE = r"(https?://)?" + _NAME_PATTERN_RE
BmcAddressPattern = Annotated[
    str,
    _matching(
        "a BMC address pattern (an optional `https://`, then letters, digits, `_.:-` and "
        "fields like `{number}` or `{number:03d}`)",
        _BMC_PATTERN_RE,
        255,
    ),
    _schema(f"^{_BMC_PATTERN_RE}$", 255, "A BMC address over format fields."),
]


ProfileName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=64)]


def _regex(value: str) -> str:
    if not value.isprintable():
        # C0/C1 controls and Unicode line separators (U+0085, U+2028) alike: YAML and the
        # line-based files downstream take several of them as line breaks.
        raise ValueError("a control character (newline, tab, ...) in a regular expression")
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regex: {exc}") from None
    return value


Regex = Annotated[str, AfterValidator(_regex), Field(max_length=512)]

_NDD_FORMAT_RE = r"[A-Za-z0-9 %._:-]+"
NodeDescriptionFormat = Annotated[
    str,
    _matching("an rdma-ndd format (letters, digits, spaces, `%._:-`)", _NDD_FORMAT_RE, 64),
    _schema(f"^{_NDD_FORMAT_RE}$", 64, "An rdma-ndd node description format."),
]


def expand_hostlist(value: str) -> list[str]:
    """The hosts of a hostlist in NodeSet order (`gpu[001-003]` -> gpu001, gpu002, gpu003),
    through the one bounded expansion (`cluster_tool.bounds.expand_hostlist`)."""
    return bounded_expand(value, "hostlist")


# --- node profiles -------------------------------------------------------------------


class Hca(StrictModel):
    """One compute HCA: the port NCCL uses for GPU `gpu`, cabled to rail `rail`."""

    device: str = Field(pattern=r"^mlx5_\d+$", description="RDMA device name, e.g. `mlx5_0`.")
    pci: PciAddress
    gpu: int = Field(ge=0, description="Index of the GPU this HCA is closest to (PIX).")
    rail: int = Field(ge=0, description="Rail (0-based) this HCA is cabled to.")
    netdev: InterfaceName | None = Field(None, description="IPoIB interface name, e.g. `ibp24s0`.")


class Nic(StrictModel):
    """A storage or management NIC: present on the node, never on a compute rail."""

    device: InterfaceName = Field(description="Device name, e.g. `mlx5_1` or `eno1`.")
    pci: PciAddress
    purpose: Literal["storage", "management", "inband"] | None = Field(
        None,
        description="What it carries; unset where the node does not say (a NIC `profile "
        "discover` found: the hardware shows its link layer and rate, not its use).",
    )
    netdev: InterfaceName | None = Field(None, description="Network interface name.")
    link_layer: Literal["InfiniBand", "Ethernet"] | None = Field(
        None,
        description="Link layer its port runs (ibstat `Link layer`): a ConnectX-7 or BlueField-3 "
        "port is InfiniBand or Ethernet as its firmware is set; unset: not stated.",
    )
    rate_gbps: int | None = Field(
        None, ge=1, description="Link rate as ibstat reports it, where the site fixes one."
    )


class NodeProfile(StrictModel):
    """A kind of GPU server: GPUs, CPUs, memory, compute HCAs and expected link rate."""

    extends: ProfileName | None = Field(
        None,
        description="Start from this profile (built-in or defined earlier) and override "
        "the keys given here.",
    )
    description: str = Field("", description="Free text shown in `spec check`.")
    gpu_model: str = Field(
        pattern=r"^[a-z0-9_]+$", description="GPU type as Slurm GRES names it (`h100`)."
    )
    gpu_product: Label = Field(description="Product name as nvidia-smi reports it.")
    gpu_count: int = Field(ge=1, le=16, description="GPUs per node.")
    gpu_memory_gib: int = Field(ge=1, description="Memory per GPU in GiB (80 for H100).")
    gpu_pci: list[PciAddress] = Field(
        default_factory=list, description="GPU PCI addresses in GPU index order (optional)."
    )
    gpu_sockets: list[int] = Field(
        default_factory=list,
        description="CPU socket each GPU hangs off, in GPU index order; default: first half "
        "on socket 0, second half on socket 1 (gres.conf `Cores=`).",
    )
    nvlink_domain_size: int = Field(8, ge=1, description="GPUs in one NVLink domain.")
    gpu_power_limit_w: float | None = Field(
        None,
        gt=0,
        description="Power limit (W) every GPU should enforce (700 on H100/H200 SXM); a GPU "
        "below it is gpu.power-limit. Unset: not checked.",
    )
    gpu_max_sm_clock_mhz: int | None = Field(
        None,
        gt=0,
        description="Maximum SM clock (MHz) the GPUs reach (1980 on H100 SXM5); a GPU whose "
        "maximum is lower is gpu.clocks. Unset: not checked.",
    )
    cpu_sockets: int = Field(ge=1, description="CPU sockets (Slurm `Sockets`).")
    cpu_cores_per_socket: int = Field(ge=1, description="Cores per socket.")
    cpu_threads_per_core: int = Field(1, ge=1, le=8, description="Hardware threads per core.")
    memory_gib: int = Field(ge=1, description="Installed system memory in GiB.")
    slurm_real_memory_mib: int = Field(
        ge=1,
        description="Slurm `RealMemory` in MiB; a little below installed memory so slurmd "
        "never reports less than configured and drains the node.",
    )
    hcas: list[Hca] = Field(description="Compute HCAs, one per rail.")
    nics: list[Nic] = Field(default_factory=list, description="Storage/management NICs.")
    expected_speed: Literal["EDR", "HDR", "NDR", "XDR"] = Field(
        "NDR", description="InfiniBand generation of the compute links (default NDR)."
    )
    expected_width: Literal["1X", "2X", "4X"] = Field(
        "4X", description="Link width of the compute links (default 4X)."
    )
    expected_rate_gbps: int = Field(
        400, ge=1, description="Link rate as ibstat reports it (default 400 for NDR 4X)."
    )
    expected_busbw_single_node_gbs: float | None = Field(
        None,
        gt=0,
        description="all_reduce_perf busbw (GB/s) one node should reach; unset: derived from "
        "the GPU's NVLink as the gate derives it (480 on HGX H100 with NVLS). The gate's floor "
        "and the planner both use it.",
    )
    expected_busbw_multi_node_gbs: float | None = Field(
        None,
        gt=0,
        description="all_reduce_perf busbw (GB/s) across nodes over the rails; unset: derived "
        "from the rails' rate as the gate derives it (370 on 8x NDR). The gate's floor and the "
        "planner both use it.",
    )

    @property
    def cpus(self) -> int:
        """Logical CPUs (Slurm `CPUs`)."""
        return self.cpu_sockets * self.cpu_cores_per_socket * self.cpu_threads_per_core

    @property
    def compute_hcas(self) -> list[Hca]:
        """Compute HCAs ordered by rail."""
        return sorted(self.hcas, key=lambda h: h.rail)

    def socket_of_gpu(self, gpu: int) -> int:
        """The CPU socket GPU `gpu` is attached to."""
        if self.gpu_sockets:
            return self.gpu_sockets[gpu]
        per_socket = max(1, -(-self.gpu_count // self.cpu_sockets))
        return min(gpu // per_socket, self.cpu_sockets - 1)

    def hca_for_rail(self, rail: int) -> Hca:
        """The compute HCA cabled to `rail`."""
        for hca in self.hcas:
            if hca.rail == rail:
                return hca
        raise KeyError(f"no HCA on rail {rail}")


# --- hosts, networks, BMCs -----------------------------------------------------------


# The node OS images the roles install on (roles/*/vars/<Distribution>_<major>.yml).
OsName = Literal["debian12", "ubuntu2204", "ubuntu2404"]
OS_TITLES = {"debian12": "Debian 12", "ubuntu2204": "Ubuntu 22.04", "ubuntu2404": "Ubuntu 24.04"}
# The Slurm release each OS's own archive ships (`slurm.packages: distribution`): slurm-wlm
# 22.05.8-4+deb12u3 in bookworm (packages.debian.org/bookworm/slurm-wlm), 21.08.5-2ubuntu1 in
# jammy and 23.11.4-1.2ubuntu5 in noble (packages.ubuntu.com/{jammy,noble}/slurm-wlm). The slurm
# role installs exactly these (roles/slurm/vars/; a unit test holds the two together).
DISTRIBUTION_SLURM = {"debian12": "22.05.8", "ubuntu2204": "21.08.5", "ubuntu2404": "23.11.4"}


class NodeGroup(StrictModel):
    """Hosts that share a profile, an OS and a consecutive block of management addresses."""

    hosts: Hostlist
    address: ipaddress.IPv4Address = Field(
        description="Management address of the first host; the others follow in hostlist order."
    )
    profile: ProfileName | None = Field(
        None, description="Node profile of GPU nodes; leave out for head/login/service hosts."
    )
    os: OsName | None = Field(
        None,
        description="The OS these hosts run: `debian12`, `ubuntu2204` or `ubuntu2404`. The "
        "bring-up's preflight refuses a host that runs another (naming both), and `spec check` "
        "holds the Slurm source to it (`slurm.packages`). Left out, the roles take what each "
        "host runs and `spec check` cannot judge the Slurm source for these hosts.",
    )
    bmc_address_pattern: BmcAddressPattern | None = Field(
        None,
        description="BMC address for this group's hosts; default: `bmc.address_pattern` "
        "for GPU nodes, none for the others.",
    )


class Management(StrictModel):
    """The management (Ethernet) network every host is reached on."""

    network: ipaddress.IPv4Network = Field(description="CIDR, e.g. `10.10.0.0/16`.")
    interface: InterfaceName = Field(
        "eno1",
        description="Interface on the management network; NCCL bootstraps over it "
        "(`NCCL_SOCKET_IFNAME`). Default `eno1`.",
    )
    domain: DomainName | None = Field(None, description="DNS domain of the hosts, if any.")
    time_servers: list[TimeServer] = Field(
        default_factory=list,
        max_length=16,
        description="NTP servers the cluster's time server (the Slurm controller) follows; every "
        "other host follows the time server. Empty (the default): no public pool is ever used, "
        "and the time server serves its own clock (an air-gapped cluster).",
    )


class SecretRef(StrictModel):
    """Where a secret lives: an environment variable or an Ansible vault variable, by name."""

    env: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Environment variable name."
    )
    vault: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Ansible vault variable name."
    )

    @model_validator(mode="before")
    @classmethod
    def _no_literal_secret(cls, data: Any) -> Any:
        if isinstance(data, str | int | float):
            raise ValueError(
                "a literal secret is not allowed in the spec; give a reference "
                "({env: VARIABLE} or {vault: variable_name})"
            )
        return data

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        if (self.env is None) == (self.vault is None):
            raise ValueError("give exactly one of `env` or `vault`")
        return self

    def describe(self) -> str:
        """`env:NAME` or `vault:NAME`, for logs and rendered vars."""
        return f"env:{self.env}" if self.env else f"vault:{self.vault}"


class BmcCredentials(StrictModel):
    """BMC login, by reference only: the spec never holds a secret."""

    username: SecretRef = Field(description="Reference to the BMC user name.")
    password: SecretRef = Field(description="Reference to the BMC password.")


class Bmc(StrictModel):
    """The nodes' BMCs (Redfish), used to re-image: one-time PXE boot + power cycle."""

    address_pattern: BmcAddressPattern = Field(
        description="BMC address of a GPU node, a Python format string over {name}, "
        "{number} (the numeric part of the hostname), {index} (1-based in its group), "
        "{su}, {index_in_su}; e.g. `10.11.0.{number}` or `{name}-bmc`."
    )
    credentials: BmcCredentials
    network: ipaddress.IPv4Network | None = Field(
        None, description="BMC network (CIDR); when given, BMC IP addresses must fall inside it."
    )
    verify_tls: bool = Field(True, description="Verify the BMC's TLS certificate.")


# --- fabric --------------------------------------------------------------------------

DEFAULT_SWITCH_NAME_PATTERN = r"^(?:[^;\s]*;)?(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)(?::\S*)?$"

# A switch's own name, as the default switch-name pattern extracts it from its node description
# (an IB node description holds 64 bytes): what the spec may name a leaf or spine.
_SWITCH_RE = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
SwitchName = Annotated[
    str,
    _matching("a switch name (letters, digits, `_`, `.`, `-`)", _SWITCH_RE, 64),
    _schema(f"^{_SWITCH_RE}$", 64, "A switch name, e.g. `A09-P1-IBLEAF-04-04`."),
]
# A node GUID as ibnetdiscover prints it (`0x2c5eab0300b87b40`), kept for the operator.
_GUID_RE = r"0x[0-9a-f]{16}"
Guid = Annotated[
    str,
    _matching("a GUID (`0x` and 16 lower-case hex digits)", _GUID_RE, 18),
    _schema(f"^{_GUID_RE}$", 18, "A node GUID, e.g. `0x2c5eab0300b87b40`."),
]


class LeafSwitch(StrictModel):
    """One leaf of an explicit switch map: the SU and the rail it carries."""

    su: int = Field(ge=1, description="Scalable unit (1-based).")
    rail: int = Field(ge=0, description="Rail (0-based) the leaf carries.")
    guid: Guid | None = Field(None, description="Its node GUID as discovered (for the operator).")


class SpineSwitch(StrictModel):
    """One spine of an explicit switch map."""

    guid: Guid | None = Field(None, description="Its node GUID as discovered (for the operator).")


class NodePlacement(StrictModel):
    """Where a GPU node is cabled: its SU, and the leaf down-port its HCAs use on every rail."""

    su: int = Field(ge=1, description="Scalable unit (1-based).")
    port: int = Field(ge=1, description="Leaf down-port of every rail's HCA.")


class HcaCable(StrictModel):
    """One HCA cabled other than its node's placement says (or not cabled at all)."""

    node: HostName
    hca: str = Field(pattern=r"^mlx5_\d+$", max_length=16, description="RDMA device, `mlx5_3`.")
    leaf: SwitchName | None = Field(None, description="The switch it is on; none: not cabled.")
    port: int | None = Field(None, ge=1, description="The switch port it is on.")

    @model_validator(mode="after")
    def _both_or_neither(self) -> HcaCable:
        if (self.leaf is None) != (self.port is None):
            raise ValueError("give both `leaf` and `port`, or neither (the HCA is not cabled)")
        return self


# A leaf up-port and the spine port it is cabled to: [leaf, leaf_port, spine, spine_port].
Uplink = tuple[SwitchName, Annotated[int, Field(ge=1)], SwitchName, Annotated[int, Field(ge=1)]]


class Fabric(StrictModel):
    """The rail-optimised InfiniBand compute fabric (DGX SuperPOD style, two tiers)."""

    rails: int = Field(8, ge=1, description="Rails; equals compute HCAs per node. Default 8.")
    su_size: int = Field(
        32, ge=1, description="GPU nodes per scalable unit (SuperPOD: 32). Default 32."
    )
    leaf_ports: int = Field(
        64, ge=2, description="Ports per leaf switch (64 for QM9700 NDR, 40 for QM8700 HDR)."
    )
    spine_ports: int | None = Field(
        None, ge=2, description="Ports per spine switch; default: `leaf_ports`."
    )
    uplinks_per_leaf: int | None = Field(
        None, ge=1, description="Leaf up-ports to the spines; default `su_size` (non-blocking)."
    )
    spines: int | None = Field(
        None,
        ge=1,
        description="Spine switches; default from the SuperPOD reference "
        "(1 SU: 4, 2 SU: 8, 3 SU: 16, 4 SU: 16). Required beyond 4 SU.",
    )
    switch_model: Label = Field("MQM9700", description="Switch model, for reports.")
    leaf_name_pattern: NamePattern = Field(
        "su{su}-leaf-r{rail}",
        description="Leaf switch name over {su} (1-based), {rail} (0-based) or {rail1} "
        "(1-based), each zero-padded as asked (`{su:02d}`). Default `su{su}-leaf-r{rail}`. "
        "Names no pattern fits go in `leaves`.",
    )
    leaves: dict[SwitchName, LeafSwitch] = Field(
        default_factory=dict,
        description="Explicit switch map, leaf name -> {su, rail, guid}, for names no "
        "`leaf_name_pattern` fits (`A09-P1-IBLEAF-04-04`); given, it replaces the pattern. "
        "`cluster-tool adopt` writes it.",
    )
    spine_switches: dict[SwitchName, SpineSwitch] = Field(
        default_factory=dict,
        description="Explicit spines by name (-> {guid}), spine 1 first; given, they replace "
        "`spine_name_pattern` and `spines`.",
    )
    placement: dict[HostName, NodePlacement] = Field(
        default_factory=dict,
        description="Where each GPU node is cabled ({su, port}), as a running cluster is; "
        "given, every GPU node needs one and it replaces the rule (SU by hostlist order, "
        "down-port by index in the SU). `cluster-tool adopt` writes it.",
    )
    cables: list[HcaCable] = Field(
        default_factory=list,
        description="HCAs cabled elsewhere than their node's placement on their rail's leaf "
        "(a departure from the rail-optimized rule, kept as it is), or not at all.",
    )
    uplinks: list[Uplink] = Field(
        default_factory=list,
        description="Leaf-to-spine links as cabled, `[leaf, port, spine, port]`; given, they "
        "replace the round-robin rule.",
    )
    spine_name_pattern: NamePattern = Field(
        "spine{n:02d}", description="Spine switch name over {n} (1-based). Default `spine{n:02d}`."
    )
    switch_name_pattern: Regex = Field(
        DEFAULT_SWITCH_NAME_PATTERN,
        description="Regex with a `name` group that extracts the switch name from its node "
        "description; the default accepts Quantum-2 `MF0;su1-leaf-r0:MQM9700/U1` and a plain "
        "`su1-leaf-r0`.",
    )
    node_description_format: NodeDescriptionFormat = Field(
        "%h %d", description="rdma-ndd node description format (default `%h %d`: `gpu001 mlx5_0`)."
    )
    subnet_manager: HostName = Field(
        description="Host that runs the subnet manager: OpenSM, installed by the opensm role "
        "(mode `opensm`), or, with an external UFM (mode `ufm`), the host that checks an SM "
        "answers (`sminfo`)."
    )
    subnet_manager_mode: Literal["opensm", "ufm"] = Field(
        "opensm",
        description="`opensm` (default): the opensm role installs and runs OpenSM on "
        "`subnet_manager` (and `standby_subnet_manager`); `ufm`: an external UFM manages the "
        "subnet, the role installs nothing and only checks that an SM answers.",
    )
    ufm_url: Url | None = Field(
        None,
        description="Mode `ufm`: the UFM server's URL (`https://ufm.example.net`). The opensm "
        "and sharp roles ask its REST API (`/ufmRest/app/ufm_version`, basic auth from "
        "CLUSTER_TOOL_UFM_USERNAME / CLUSTER_TOOL_UFM_PASSWORD) that it runs the subnet manager "
        "and, with `sharp`, the SHARP aggregation manager; left out, they check only that an SM "
        "answers (`sminfo`).",
    )
    standby_subnet_manager: HostName | None = Field(
        None,
        description="Second OpenSM host, at a lower `sm_priority` than `subnet_manager` "
        "(a primary/standby pair). Mode `opensm` only.",
    )
    adaptive_routing: bool = Field(
        False,
        description="Route with NVIDIA OpenSM's adaptive-routing engines (`ar_ftree,ar_updn`; "
        "NVIDIA OpenSM from the DOCA-Host repository). Implied by `sharp`.",
    )
    expected_speed: Literal["EDR", "HDR", "NDR", "XDR"] = Field(
        "NDR", description="Generation of every fabric link (default NDR)."
    )
    expected_width: Literal["1X", "2X", "4X"] = Field("4X", description="Link width (default 4X).")
    expected_rate_gbps: int = Field(400, ge=1, description="Link rate in Gb/s (default 400).")
    sharp: bool = Field(False, description="SHARP in-network reductions (NCCL CollNet) enabled.")

    @property
    def spine_port_count(self) -> int:
        """Ports per spine switch."""
        return self.spine_ports or self.leaf_ports

    @property
    def uplink_count(self) -> int:
        """Up-ports per leaf."""
        return self.uplinks_per_leaf or self.su_size

    def spine_count(self, su_count: int) -> int | None:
        """Spine switches for `su_count` SUs; None when the reference table has no answer."""
        if self.spine_switches:
            return len(self.spine_switches)
        return self.spines or SUPERPOD_SPINES.get(su_count)

    def leaf_name(self, su: int, rail: int) -> str:
        """Name of the leaf for rail `rail` (0-based) in SU `su` (1-based): from the switch
        map when there is one (the first leaf it lists for that SU and rail), else the pattern.
        KeyError when the map has none."""
        if self.leaves:
            for name, leaf in self.leaves.items():
                if (leaf.su, leaf.rail) == (su, rail):
                    return name
            raise KeyError(f"no leaf for SU {su} rail {rail} in fabric.leaves")
        return self.leaf_name_pattern.format(su=su, rail=rail, rail1=rail + 1)

    def spine_name(self, n: int) -> str:
        """Name of spine `n` (1-based)."""
        if self.spine_switches:
            return list(self.spine_switches)[n - 1]
        return self.spine_name_pattern.format(n=n)

    def switch_name(self, node_description: str) -> str | None:
        """The switch name inside a discovered node description, or None if none matches."""
        match = re.match(self.switch_name_pattern, node_description.strip())
        return match.group("name") if match else None


# --- Slurm, software, NCCL, thresholds ------------------------------------------------


class Partition(StrictModel):
    """One Slurm partition."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]+$")
    nodes: Hostlist | None = Field(None, description="Hosts of the partition; default all GPUs.")
    default: bool = Field(False, description="The default partition.")
    max_time: SlurmDuration = Field("INFINITE", description="Slurm `MaxTime`.")


# Slurm's HealthCheckNodeState words (slurm.conf).
HealthCheckNodeState = Literal[
    "ANY", "ALLOC", "IDLE", "MIXED", "NONDRAINED_IDLE", "CYCLE", "START_ONLY"
]


AptSuite = Annotated[
    str,
    _matching("an apt suite (letters, digits, `.`, `_`, `-`, `/`)", r"[A-Za-z0-9._/-]+", 64),
    _schema(r"^[A-Za-z0-9._/-]+$", 64, "An apt suite: a codename (`jammy`) or `./` (flat)."),
]
AptComponent = Annotated[
    str,
    _matching("an apt component (letters, digits, `.`, `_`, `-`)", r"[A-Za-z0-9._-]+", 64),
    _schema(r"^[A-Za-z0-9._-]+$", 64, "An apt component, e.g. `main`."),
]


class SlurmRepository(StrictModel):
    """The site's apt repository of SchedMD-built packages (`slurm-smd`, `slurm-smd-slurmd`, ...).

    SchedMD publishes Slurm as source only; a site builds the packages from the release tarball
    (`debuild`, its `debian/` folder) and serves them to its nodes."""

    url: Url = Field(description="Repository URL, e.g. `https://repo.example.net/slurm-smd/`.")
    suites: list[AptSuite] = Field(
        default_factory=lambda: ["./"],
        min_length=1,
        max_length=8,
        description="Suites (default `./`: a flat repository); e.g. `[jammy]` for one with "
        "`dists/`.",
    )
    components: list[AptComponent] = Field(
        default_factory=list,
        max_length=8,
        description="Components (`[main]`); none for a flat repository (the default).",
    )
    key_url: Url | None = Field(
        None,
        description="The repository's signing key (deb822 `Signed-By`). Leave out only for a "
        "repository apt may trust unsigned (`cluster_repos_trusted` in `ansible_vars`).",
    )


class Slurm(StrictModel):
    """Slurm roles, partitions, and where its packages come from."""

    cluster_name: SlurmClusterName | None = Field(
        None, description="`ClusterName`; default: cluster name."
    )
    controller: HostName = Field(description="Host running slurmctld.")
    accounting_host: HostName | None = Field(None, description="Host running slurmdbd, if any.")
    login_nodes: Hostlist | None = Field(None, description="Login hosts, if any.")
    packages: Literal["distribution", "schedmd"] = Field(
        "distribution",
        description="Where Slurm comes from. `distribution` (default): each OS's own packages "
        "(Debian 12: 22.05, Ubuntu 24.04: 23.11; Ubuntu 22.04's 21.08 is refused: no cgroup "
        "v2). `schedmd`: SchedMD's `slurm-smd` packages at `software.slurm_version` from "
        "`slurm.repository`, the same release on every OS.",
    )
    repository: SlurmRepository | None = Field(
        None, description="The site repository of `slurm-smd` packages (`packages: schedmd`)."
    )
    uid: int = Field(
        64030,
        ge=1,
        le=4294967294,
        description="User id of the `slurm` user, created before any package on every Slurm "
        "host so that every node agrees (SchedMD's packages create no user). Default 64030, "
        "the id Debian's packages give it.",
    )
    gid: int = Field(
        64030, ge=1, le=4294967294, description="Group id of the `slurm` group (default 64030)."
    )
    partitions: list[Partition] = Field(
        default_factory=lambda: [Partition.model_validate({"name": "gpu", "default": True})],
        description="Partitions; default one `gpu` partition over all GPU nodes.",
    )
    health_check_interval: int = Field(
        300,
        ge=0,
        le=86400,
        description="`HealthCheckInterval`: seconds between runs of `cluster-tool node-check "
        "--slurm` as HealthCheckProgram on every GPU node (default 300; 0 turns it off).",
    )
    health_check_node_state: list[HealthCheckNodeState] = Field(
        default_factory=lambda: list[HealthCheckNodeState](["ANY"]),
        min_length=1,
        description="`HealthCheckNodeState`: in which node states it runs (default ANY; CYCLE "
        "spreads the runs over the interval instead of all nodes at once).",
    )
    # With SelectTypeParameters=CR_Core_Memory and no default per GPU, a job that asks for GPUs
    # but no --mem is given the whole node's memory (DefMemPerNode is UNLIMITED): one 1-GPU job
    # blocks the other seven. Unset, these come from the partition's node profiles.
    def_mem_per_gpu_mib: int | None = Field(
        None,
        ge=1,
        description="`DefMemPerGPU` on every partition, in MiB; default: each partition's "
        "smallest profile `slurm_real_memory_mib / gpu_count` (a GPU's share of the node).",
    )
    def_cpu_per_gpu: int | None = Field(
        None,
        ge=1,
        description="`DefCpuPerGPU` on every partition; default: each partition's smallest "
        "profile `cpus / gpu_count` (a GPU's share of the node's CPUs).",
    )
    unkillable_step_timeout: int = Field(
        300,
        ge=60,
        le=3600,
        description="`UnkillableStepTimeout` in seconds (default 300; Slurm's own 60 drains GPU "
        "nodes with 'Kill task failed' while a CUDA process is still releasing its GPU).",
    )


class Repositories(StrictModel):
    """Every repository or download URL the roles use; air-gapped sites point them at mirrors."""

    # These three are per OS release (ubuntu2204 vs ubuntu2404 ...): unset, each node gets its
    # own OS's from the roles; set, the mirror serves every node.
    cuda: Url | None = Field(
        None, description="CUDA repository; default NVIDIA's for each node's OS (role default)."
    )
    doca: Url | None = Field(
        None, description="DOCA-Host repository; default NVIDIA's for each node's OS and release."
    )
    hpcx: Url | None = Field(
        None, description="HPC-X tarball; default NVIDIA's build for each node's OS."
    )
    nccl_tests: Url = "https://github.com/NVIDIA/nccl-tests.git"
    enroot: Url = "https://github.com/NVIDIA/enroot/releases/download/"
    pyxis: Url = "https://github.com/NVIDIA/pyxis.git"

    @model_validator(mode="before")
    @classmethod
    def _slurm_moved(cls, data: Any) -> Any:
        # It named SchedMD's source downloads, which no role read; the packages' repository is
        # part of choosing them now.
        if isinstance(data, dict) and "slurm" in data:
            raise ValueError(
                "`slurm` is no longer a download URL here: SchedMD's packages come from your "
                "apt repository of slurm-smd packages, `slurm.repository` with "
                "`slurm.packages: schedmd`"
            )
        return data


class Software(StrictModel):
    """Pinned versions of the node stack. The defaults are a 2025 H100/H200 stack, each from
    its release notes (docs/compat.md, "The default stack")."""

    nvidia_driver_branch: Version = Field("570", description="Driver branch (default 570).")
    nvidia_driver_version: Version = Field(
        "570.172.08", description="Driver version, open kernel modules (default 570.172.08)."
    )
    cuda_version: Version = Field("12.8", description="CUDA toolkit (default 12.8).")
    doca_ofed_version: Version = Field("3.1.0", description="DOCA-OFED (default 3.1.0).")
    nccl_version: Version = Field("2.26.2-1+cuda12.8", description="NCCL package version.")
    hpcx_version: Version = Field("2.20", description="HPC-X, which carries the SHARP plugin.")
    sharp_plugin_version: Version = Field(
        "3.12.0", description="SHARP release behind the NCCL plugin (default 3.12.0, DOCA 3.1.0's)."
    )
    slurm_version: Version | None = Field(
        None,
        description="Slurm release. With `slurm.packages: schedmd`, the release the site "
        "repository serves (required). With `distribution`, leave it out (each OS's own "
        "release is installed); a version written here must be that release.",
    )
    dcgm_version: Version = Field("4.2.3", description="DCGM (default 4.2.3).")
    dcgm_exporter_version: Version = Field(
        "4.2.3-4.1.3",
        description="dcgm-exporter release as NVIDIA tags it, <DCGM it was built for>-<exporter> "
        "(default 4.2.3-4.1.3).",
    )
    nccl_tests_version: Version = Field("v2.13.11", description="nccl-tests git tag.")
    repositories: Repositories = Field(default_factory=lambda: Repositories.model_validate({}))


Collective = Literal[
    "all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv"
]


def _default_collectives() -> list[Collective]:
    return ["all_reduce", "all_gather", "reduce_scatter", "alltoall"]


class NcclTests(StrictModel):
    """How the nccl-tests job scripts run."""

    collectives: list[Collective] = Field(
        default_factory=_default_collectives, description="Which *_perf binaries to run."
    )
    min_bytes: ByteSize = Field("8", description="nccl-tests `-b` (default 8).")
    max_bytes: ByteSize = Field("16G", description="nccl-tests `-e` (default 16G).")
    step_factor: int = Field(2, ge=2, description="nccl-tests `-f` (default 2).")
    iters: int = Field(20, ge=1, description="nccl-tests `-n` (default 20).")
    warmup_iters: int = Field(5, ge=0, description="nccl-tests `-w` (default 5).")
    binary_dir: AbsolutePath = Field(
        "/opt/nccl-tests/build", description="Where the nccl-tests role installs the binaries."
    )


class Nccl(StrictModel):
    """The NCCL environment rendered into nccl.conf."""

    socket_ifname: InterfaceName | None = Field(
        None, description="`NCCL_SOCKET_IFNAME`; default `management.interface`."
    )
    extra_env: dict[NcclEnvKey, EnvValue] = Field(
        default_factory=dict, description="More NCCL_* variables, written as given."
    )
    tests: NcclTests = Field(default_factory=lambda: NcclTests.model_validate({}))


# --- in service: cluster-tool watch --------------------------------------------------


class Watch(StrictModel):
    """`cluster-tool watch`: how often it looks, what it may do about what it finds, and how
    much of the fleet it may take out of service before it suspects the fabric instead."""

    policy: Literal["observe", "drain", "requeue"] = Field(
        "observe",
        description="observe: findings only (default); drain: drain the node, the finding id "
        "in the reason; requeue: drain, then `scontrol requeue` the node's running jobs that "
        "opted in (`requeue_marker`). `cluster-tool watch --policy` overrides it for one run.",
    )
    interval_s: int = Field(
        60, ge=5, le=86400, description="Seconds between two watch cycles (default 60)."
    )
    max_drained_share: float = Field(
        0.05,
        gt=0,
        le=1,
        description="The watcher never holds more than this share of the GPU nodes drained "
        "(at least one node; default 0.05): beyond it, it stops acting and raises `watch.fleet`.",
    )
    requeue_marker: str = Field(
        "watch-requeue",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:=-]*$",
        max_length=64,
        description="A job opts in to being requeued when its comment (`sbatch --comment`) or "
        "its features (`--constraint`) hold this word (default `watch-requeue`).",
    )
    release_requeued: bool = Field(
        True,
        description="Slurm holds a requeued batch job until AuthInfo cred_expire + 1 s (121 s "
        "by default) after its previous run was cleaned up, so that no slurmd refuses the new "
        "launch as the old run's revoked credential. When true (default), the next cycle after "
        "a requeue, once Slurm shows the job PENDING for BeginTime (the previous run's epilog "
        "done on every node), ends the hold (`scontrol update JobId=ID StartTime=now`): the new "
        "launch credential is stamped after the revocation, which is all slurmd compares.",
    )
    checkpoint_grace_s: int = Field(
        300,
        ge=0,
        le=3600,
        description="Under `requeue`: before requeueing an opted-in job, the watcher sends its "
        "batch step SIGUSR1 (the checkpoint signal `plan --sbatch` jobs trap) and waits up to "
        "this many seconds for the job's complete-checkpoint marker (`training.reports_dir`) "
        "or its end (default 300; 0: requeue at once, as before).",
    )
    state_dir: AbsolutePath = Field(
        "/var/lib/cluster-tool/watch",
        description="Where the watcher keeps what it saw between cycles, its event log and its "
        "textfile for node_exporter (default /var/lib/cluster-tool/watch; `--state-dir`).",
    )
    straggler_cycles: int = Field(
        3,
        ge=2,
        le=100,
        description="A node is named a straggler of its job (`watch.straggler`) when it is "
        "the slow one in this many cycles running (default 3): a one-off blip is not.",
    )
    straggler_z: float = Field(
        3.5,
        gt=0,
        description="How far below the job's other nodes a node's rate must be, as a robust "
        "z-score (0.6745 x distance / MAD), to count as slow in a cycle (default 3.5).",
    )
    straggler_min_drop: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="...and by at least this fraction of the job's median (default 0.2), so "
        "a job whose nodes never differ (MAD 0) is not flagged for a wobble.",
    )
    probes: bool = Field(
        False,
        description="Run short NCCL probes on idle GPU nodes (default off): every "
        "`probe_every` cycles, a per-rail all_reduce of `probe_bytes` between neighbours of a "
        "ring of the IDLE nodes, as low-priority Slurm jobs (never on a node running a job), "
        "each node's busbw per rail kept as its own baseline (`watch.probe` when it falls "
        "below it). Needs `probe_workdir`.",
    )
    probe_every: int = Field(
        10, ge=1, le=10000, description="Cycles between two probe runs (default 10)."
    )
    probe_partition: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_.-]{1,64}$",
        description="The Slurm partition of the probe jobs: a low-priority one (PriorityTier "
        "below the users'), so a user's job is never kept waiting by a probe (default: the "
        "spec's default partition).",
    )
    probe_bytes: str = Field(
        "64M",
        pattern=r"^[1-9][0-9]{0,5}[KMG]?$",
        description="The probe's all_reduce size, nccl-tests' -b and -e (default 64M: seconds "
        "per rail, near the link's rate).",
    )
    probe_min_drop: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="A node's probe busbw on a rail counts as low when it is this fraction "
        "(default 0.2) below its own baseline and past thresholds.history.mad_z; its baseline "
        "needs thresholds.history.min_runs earlier probe runs.",
    )
    probe_workdir: AbsolutePath | None = Field(
        None,
        description="A folder the watcher's host and the GPU nodes share (the probe jobs' "
        "scripts and outputs), as the gate's workdir.",
    )

    @model_validator(mode="after")
    def _probes_need_a_workdir(self) -> Watch:
        if self.probes and self.probe_workdir is None:
            raise ValueError("watch.probes needs watch.probe_workdir (a folder the nodes share)")
        return self


# --- storage: the shared filesystem, local scratch, and training jobs ------------------

# Mount options as fstab writes them (`vers=4.2`, `nconnect=8`, `_netdev`, `flock`).
_MOUNT_OPTION_RE = r"[A-Za-z0-9_][A-Za-z0-9_=.:+-]*"
MountOption = Annotated[
    str,
    _matching("a mount option (letters, digits, `_=.:+-`)", _MOUNT_OPTION_RE, 64),
    _schema(f"^{_MOUNT_OPTION_RE}$", 64, "A mount option, e.g. `vers=4.2` or `nconnect=8`."),
]
# What a parallel filesystem client mounts: Lustre `10.0.0.1@o2ib:/lustre`, Weka
# `backend01/default`, GPFS `gpfs0`.
_FS_SOURCE_RE = r"[A-Za-z0-9][A-Za-z0-9_.:@,/-]*"
FsSource = Annotated[
    str,
    _matching("a filesystem source (letters, digits, `_.:@,/-`)", _FS_SOURCE_RE, 255),
    AfterValidator(_no_dot_dot),
    _schema(f"^{_FS_SOURCE_RE}$", 255, "A mount source, e.g. `10.0.0.1@o2ib:/lustre`."),
]
_DEVICE_RE = r"/dev/[A-Za-z0-9_.-]+(/[A-Za-z0-9_.:-]+)*"
DevicePath = Annotated[
    str,
    _matching("a device path (`/dev/...`)", _DEVICE_RE, 255),
    AfterValidator(_no_dot_dot),
    _schema(f"^{_DEVICE_RE}$", 255, "A block device, e.g. `/dev/nvme1n1`."),
]
# pyxis' image reference: `[USER@][REGISTRY#]IMAGE[:TAG]`, or a squashfs file.
_IMAGE_RE = r"[A-Za-z0-9][A-Za-z0-9_.:/#@+-]*"
ContainerImage = Annotated[
    str,
    _matching("a container image (letters, digits, `_.:/#@+-`)", _IMAGE_RE, 255),
    AfterValidator(_no_dot_dot),
    _schema(f"^{_IMAGE_RE}$", 255, "A pyxis image, e.g. `nvcr.io#nvidia/pytorch:24.05-py3`."),
]

# The filesystem type each kind shows in /proc/mounts (an NFS mount is `nfs` or `nfs4`).
SHARED_FSTYPES: dict[str, tuple[str, ...]] = {
    "nfs": ("nfs4", "nfs"),
    "lustre": ("lustre",),
    "weka": ("wekafs",),
    "gpfs": ("gpfs",),
}


class SharedFilesystem(StrictModel):
    """The filesystem every node shares: where checkpoints land, datasets live and the gate's
    jobs write. NFS from a host of the spec (the `shared_fs` role serves it) or an existing
    server; a Lustre, Weka or GPFS client the role installs and mounts."""

    kind: Literal["nfs", "lustre", "weka", "gpfs"] = Field(
        "nfs", description="nfs (default), lustre, weka or gpfs."
    )
    mount: AbsolutePath = Field("/shared", description="Where every host mounts it.")
    server: HostName | None = Field(
        None,
        description="nfs: the server. A host of this spec is made the NFS server by the "
        "shared_fs role (exporting `export` to the management network); any other name is an "
        "existing server the nodes mount from.",
    )
    export: AbsolutePath = Field(
        "/srv/shared", description="nfs: the exported path on the server (default /srv/shared)."
    )
    source: FsSource | None = Field(
        None,
        description="lustre: `MGS_NID:/fsname` (`10.0.0.1@o2ib:/lustre`); weka: "
        "`BACKEND/FILESYSTEM`; gpfs: the device (`gpfs0`). Not for nfs.",
    )
    options: list[MountOption] = Field(
        default_factory=list,
        max_length=32,
        description="Mount options; default per kind (nfs: `vers=4.2,hard,_netdev`).",
    )

    @model_validator(mode="after")
    def _source_fits_kind(self) -> SharedFilesystem:
        if self.kind == "nfs" and self.server is None:
            raise ValueError("an nfs shared filesystem needs `server`")
        if self.kind == "nfs" and self.source is not None:
            raise ValueError("nfs takes `server` and `export`, not `source`")
        if self.kind != "nfs" and self.source is None:
            raise ValueError(f"a {self.kind} shared filesystem needs `source`")
        return self

    @property
    def fstypes(self) -> tuple[str, ...]:
        """The filesystem types /proc/mounts may show for it."""
        return SHARED_FSTYPES[self.kind]

    @property
    def mount_source(self) -> str:
        """What /proc/mounts shows as its source (`head:/srv/shared` for nfs)."""
        return f"{self.server}:{self.export}" if self.kind == "nfs" else str(self.source)


class Scratch(StrictModel):
    """Fast node-local storage for checkpoints (NVMe): the `local_scratch` role assembles the
    devices (RAID 0 when more than one), makes the filesystem and mounts it."""

    mount: AbsolutePath = Field("/scratch", description="Where it is mounted (default /scratch).")
    devices: list[DevicePath] = Field(
        default_factory=list,
        max_length=64,
        description="The NVMe devices, e.g. `/dev/nvme1n1`; two or more become one RAID 0 "
        "(mdadm). Never the OS disk.",
    )
    filesystem: Literal["xfs", "ext4", "tmpfs"] = Field(
        "xfs",
        description="xfs (default) or ext4 on the devices; tmpfs (memory, `size`) where a node "
        "has no NVMe to spare (the lab).",
    )
    size: ByteSize | None = Field(None, description="tmpfs only: its size, e.g. `2G`.")

    @model_validator(mode="after")
    def _devices_fit_filesystem(self) -> Scratch:
        if self.filesystem == "tmpfs":
            if self.devices:
                raise ValueError("a tmpfs scratch takes `size`, not `devices`")
            if self.size is None:
                raise ValueError("a tmpfs scratch needs `size`")
        elif not self.devices:
            raise ValueError(f"an {self.filesystem} scratch needs `devices`")
        elif self.size is not None:
            raise ValueError("`size` is for tmpfs only: the devices give the size")
        return self


class Storage(StrictModel):
    """The shared filesystem and the nodes' local scratch; node-check holds every GPU node to
    having both mounted (`storage.mount`) and the scratch not full (`storage.scratch-full`)."""

    shared: SharedFilesystem | None = Field(None, description="The shared filesystem, if any.")
    scratch: Scratch | None = Field(None, description="Local NVMe scratch on GPU nodes, if any.")


class TrainingJobs(StrictModel):
    """How `plan --sbatch` writes a resumable training job: checkpoints on local scratch synced
    to the shared filesystem, the signal before the end, the container, and where the job
    reports its checkpoints and step times to `cluster-tool watch`."""

    checkpoint_dir: AbsolutePath | None = Field(
        None,
        description="Where complete checkpoints live (Megatron-LM `--save`/`--load`), one "
        "folder per run; default `<storage.shared.mount>/checkpoints`.",
    )
    local_checkpoint_dir: AbsolutePath | None = Field(
        None,
        description="Where each node writes a checkpoint first, then syncs it in the background "
        "to `checkpoint_dir`; default `<storage.scratch.mount>/checkpoints` (without scratch the "
        "trainer writes to checkpoint_dir directly).",
    )
    reports_dir: AbsolutePath | None = Field(
        None,
        description="A folder the watcher's host and the GPU nodes share, where a job writes "
        "its complete-checkpoint marker and its per-rank step times (one folder per job id); "
        "default `<storage.shared.mount>/cluster-tool/jobs`.",
    )
    save_interval: int = Field(
        1000, ge=1, le=10_000_000, description="Steps between two checkpoints (default 1000)."
    )
    signal_lead_s: int = Field(
        300,
        ge=10,
        le=65535,
        description="`--signal=B:USR1@N`: Slurm signals the batch script N seconds before the "
        "time limit, and it checkpoints and requeues (default 300).",
    )
    time_limit: SlurmDuration = Field(
        "2-00:00:00", description="The job's `--time` (default 2 days)."
    )
    container_image: ContainerImage | None = Field(
        None,
        description="pyxis `--container-image` for the trainer (e.g. "
        "`nvcr.io#nvidia/pytorch:24.05-py3`); none: it runs on the host.",
    )
    trainer: AbsolutePath = Field(
        "/opt/megatron-lm/pretrain_gpt.py",
        description="The training script (default Megatron-LM's `pretrain_gpt.py`).",
    )
    data_path: AbsolutePath | None = Field(
        None,
        description="Megatron-LM `--data-path` prefix; none: `--mock-data` (a smoke run).",
    )

    def checkpoints(self, storage: Storage) -> str | None:
        """Where complete checkpoints live, or None when neither is given."""
        if self.checkpoint_dir is not None:
            return self.checkpoint_dir
        return f"{storage.shared.mount}/checkpoints" if storage.shared else None

    def local_checkpoints(self, storage: Storage) -> str | None:
        if self.local_checkpoint_dir is not None:
            return self.local_checkpoint_dir
        return f"{storage.scratch.mount}/checkpoints" if storage.scratch else None

    def reports(self, storage: Storage) -> str | None:
        if self.reports_dir is not None:
            return self.reports_dir
        return f"{storage.shared.mount}/cluster-tool/jobs" if storage.shared else None


# --- the cluster ---------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """One host of the cluster as the toolkit sees it (derived from the spec)."""

    name: str
    address: str
    roles: tuple[str, ...]
    bmc_address: str | None = None
    profile: NodeProfile | None = field(default=None, repr=False, compare=False)
    profile_name: str | None = None
    su: int | None = None
    index_in_su: int | None = None
    group: int = 0
    os: str | None = None  # the group's `os`, when the spec states it

    @property
    def is_gpu(self) -> bool:
        """True for GPU nodes (those with a profile)."""
        return self.profile is not None


ROLE_GPU = "gpu"
ROLE_MANAGEMENT = "management"
ROLE_CONTROLLER = "slurm_controller"
ROLE_SLURMDBD = "slurmdbd"
ROLE_LOGIN = "login"
ROLE_SUBNET_MANAGER = "subnet_manager"


class Cluster(StrictModel):
    """A whole cluster: the one file an SRE writes."""

    api_version: Literal["cluster-tool/v1"] = Field(alias="apiVersion")
    kind: Literal["Cluster"]
    name: str = Field(pattern=r"^[a-z][a-z0-9-]*$", description="Cluster name (inventory dir).")
    profiles: dict[ProfileName, NodeProfile] = Field(
        default_factory=dict,
        description="User-defined node profiles (built-in: " + ", ".join(BUILTIN_PROFILES) + ").",
    )
    nodes: list[NodeGroup] = Field(min_length=1, description="Host groups.")
    management: Management
    bmc: Bmc
    fabric: Fabric
    slurm: Slurm
    software: Software = Field(default_factory=lambda: Software.model_validate({}))
    nccl: Nccl = Field(default_factory=lambda: Nccl.model_validate({}))
    thresholds: Thresholds = Field(default_factory=lambda: Thresholds.model_validate({}))
    watch: Watch = Field(default_factory=lambda: Watch.model_validate({}))
    storage: Storage = Field(default_factory=lambda: Storage.model_validate({}))
    training: TrainingJobs = Field(default_factory=lambda: TrainingJobs.model_validate({}))
    ansible_vars: dict[AnsibleVarName, Any] = Field(
        default_factory=dict,
        description="Extra Ansible variables merged last into group_vars/all.yml (e.g. a "
        "lab pointing repository URLs at a local mirror). Written as given: Ansible templates "
        "these values, the one place in the spec meant for templates (a vault reference such "
        "as `'{{ vault_dbd_pass }}'`). Ansible's own `ansible_*` variables are refused here.",
    )
    ansible_connection_vars: dict[AnsibleVarName, str | int | bool] = Field(
        default_factory=dict,
        description="Ansible's connection, privilege and interpreter variables "
        "(`ansible_ssh_common_args`, `ansible_become_*`, `ansible_connection`, "
        "`ansible_python_interpreter`, ...), set on purpose: they decide how and as whom "
        "Ansible reaches every host and what it runs there, so they are never taken from "
        "`ansible_vars`. Written into group_vars/all.yml as given.",
    )

    _hosts: list[Node] | None = PrivateAttr(default=None)
    # Name -> host, built with `_hosts`: `host()` is asked once per node of a run.
    _host_index: dict[str, Node] | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _resolve_profile_extends(cls, data: Any) -> Any:
        # `extends` copies the base profile and overrides the given keys, so a lab can say
        # "an H100 box but with HDR links" in three lines.
        if not isinstance(data, dict) or not isinstance(data.get("profiles"), dict):
            return data
        raw: dict[str, Any] = data["profiles"]
        resolved: dict[str, Any] = {}

        def resolve(name: str, seen: tuple[str, ...]) -> Any:
            if name in resolved:
                return resolved[name]
            body = raw.get(name)
            if not isinstance(body, dict) or "extends" not in body or name in seen:
                return body
            base_name = body["extends"]
            if isinstance(base_name, str) and base_name in raw and base_name != name:
                base = resolve(base_name, (*seen, name))
            elif isinstance(base_name, str):
                base = BUILTIN_PROFILES.get(base_name)
            else:
                base = None
            if not isinstance(base, dict):
                return body
            merged = {k: v for k, v in base.items() if k != "extends"}
            merged.update(body)
            resolved[name] = merged
            return merged

        profiles = {name: resolve(name, ()) for name in raw}
        return {**data, "profiles": profiles}

    # -- derived view -----------------------------------------------------------------

    def profile(self, name: str) -> NodeProfile:
        """A profile by name: user-defined first, then built-in."""
        if name in self.profiles:
            return self.profiles[name]
        return builtin_profile(name)

    def profile_names(self) -> list[str]:
        """Every profile name this spec can use."""
        return sorted(set(self.profiles) | set(BUILTIN_PROFILES))

    @property
    def slurm_cluster_name(self) -> str:
        """Slurm `ClusterName`."""
        return self.slurm.cluster_name or self.name

    @property
    def socket_ifname(self) -> str:
        """`NCCL_SOCKET_IFNAME`."""
        return self.nccl.socket_ifname or self.management.interface

    def hosts(self) -> list[Node]:
        """Every host with its roles, in spec order (groups, then hostlist order)."""
        if self._hosts is None:
            self._hosts = _derive_hosts(self)
        return self._hosts

    def gpu_nodes(self) -> list[Node]:
        """GPU nodes in SU order."""
        return [n for n in self.hosts() if n.is_gpu]

    def host(self, name: str) -> Node:
        """One host by name (KeyError if absent)."""
        if self._host_index is None:
            index: dict[str, Node] = {}
            for node in self.hosts():
                index.setdefault(node.name, node)  # the first, as a scan would find it
            self._host_index = index
        return self._host_index[name]

    @property
    def su_count(self) -> int:
        """Scalable units the GPU nodes fill."""
        sus = [leaf.su for leaf in self.fabric.leaves.values()]
        sus += [place.su for place in self.fabric.placement.values()]
        if sus:
            return max(sus)
        count = len(self.gpu_nodes())
        return max(1, -(-count // self.fabric.su_size))

    @property
    def spine_count(self) -> int:
        """Spine switches (explicit, or from the SuperPOD table); 0 if neither gives one."""
        return self.fabric.spine_count(self.su_count) or 0

    def gpu_profiles(self) -> dict[str, NodeProfile]:
        """The profiles GPU node groups use, by name."""
        names = {g.profile for g in self.nodes if g.profile}
        out: dict[str, NodeProfile] = {}
        for name in sorted(names):
            try:
                out[name] = self.profile(name)
            except KeyError:
                continue
        return out


def builtin_profile(name: str) -> NodeProfile:
    """A built-in profile as a model (KeyError if unknown)."""
    return NodeProfile.model_validate(BUILTIN_PROFILES[name])


_NUMBER = re.compile(r"(\d+)(?!.*\d)")


def host_number(name: str) -> int | None:
    """The last run of digits in a hostname (`gpu017` -> 17), or None."""
    match = _NUMBER.search(name)
    return int(match.group(1)) if match else None


def format_bmc_address(pattern: str, node: Node, index: int) -> str:
    """Fill a BMC address pattern for one node (raises KeyError/ValueError on a bad pattern)."""
    number = host_number(node.name)
    if number is None and "{number" in pattern:
        raise ValueError(f"{node.name} has no number for {{number}}")
    return pattern.format(
        name=node.name,
        number=number,
        index=index,
        su=node.su,
        index_in_su=node.index_in_su,
    )


def _derive_hosts(cluster: Cluster) -> list[Node]:
    roles_of: dict[str, list[str]] = {}

    def add_role(hostlist: str | None, role: str) -> None:
        for name in expand_hostlist(hostlist or ""):
            roles_of.setdefault(name, []).append(role)

    add_role(cluster.slurm.controller, ROLE_CONTROLLER)
    add_role(cluster.slurm.accounting_host, ROLE_SLURMDBD)
    add_role(cluster.slurm.login_nodes, ROLE_LOGIN)
    add_role(cluster.fabric.subnet_manager, ROLE_SUBNET_MANAGER)
    add_role(cluster.fabric.standby_subnet_manager, ROLE_SUBNET_MANAGER)

    hosts: list[Node] = []
    gpu_seen = 0
    su_size = cluster.fabric.su_size
    for group_index, group in enumerate(cluster.nodes):
        profile: NodeProfile | None = None
        if group.profile:
            try:
                profile = cluster.profile(group.profile)
            except KeyError:
                profile = None
        pattern = group.bmc_address_pattern
        if pattern is None and group.profile:
            pattern = cluster.bmc.address_pattern
        for index, name in enumerate(expand_hostlist(group.hosts), start=1):
            address = str(group.address + (index - 1))
            su = index_in_su = None
            base_role = ROLE_MANAGEMENT
            if group.profile:
                su, index_in_su = gpu_seen // su_size + 1, gpu_seen % su_size + 1
                placed = cluster.fabric.placement.get(name)
                if placed is not None:  # cabled as it is, not by the rule
                    su, index_in_su = placed.su, placed.port
                gpu_seen += 1
                base_role = ROLE_GPU
            node = Node(
                name=name,
                address=address,
                roles=(base_role, *roles_of.get(name, [])),
                profile=profile,
                profile_name=group.profile,
                su=su,
                index_in_su=index_in_su,
                group=group_index,
                os=group.os,
            )
            if pattern is not None:
                try:
                    bmc = format_bmc_address(pattern, node, index)
                except (KeyError, ValueError, IndexError, TypeError):
                    bmc = None  # reported by the cross-field checks
                node = replace(node, bmc_address=bmc)
            hosts.append(node)
    return hosts
