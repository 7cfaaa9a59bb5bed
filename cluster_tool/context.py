"""Where a cluster is reached from this controller: its inventory, SSH config, Slurm host, the
gate's shared folder, the BMC transport and the secrets its runs need, kept per cluster name so
that `cluster-tool bringup SPEC` needs no more options than the spec.

`cluster-tool lab up` writes the lab's; an operator may write one for any cluster (`docs`
README, "The lab"). Options on the command line win over the context, and the environment wins
over the secrets it holds. The file holds secrets: it is the operator's (0600), and a context
anyone else can read or write is refused.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cluster_tool.errors import UsageError
from cluster_tool.fileio import atomic_write, load_json

_ENV_DIR = "CLUSTER_TOOL_CONTEXT_DIR"
# A context is a few paths and secrets; anything larger is not one.
_MAX_BYTES = 64 * 1024


def context_dir() -> Path:
    """$CLUSTER_TOOL_CONTEXT_DIR, else ~/.cluster-tool/clusters."""
    given = os.environ.get(_ENV_DIR)
    return Path(given) if given else Path.home() / ".cluster-tool" / "clusters"


@dataclass
class SiteContext:
    """How this controller reaches one cluster (every field optional)."""

    cluster: str
    inventory: str | None = None
    ssh_config: str | None = None
    slurm_via: str | None = None
    gate_workdir: str | None = None
    # The BMCs' transport when they are not https with verified certificates (the lab's
    # emulators answer plain http): the operator's standing --insecure-bmc --bmc-scheme.
    bmc_insecure: bool = False
    bmc_scheme: str | None = None
    # Secrets and settings the runs read from the environment (CLUSTER_TOOL_SLURMDBD_PASSWORD,
    # the BMC credentials the spec's {env: ...} names).
    env: dict[str, str] = field(default_factory=dict)
    written_by: str = ""

    def path(self) -> Path:
        return context_dir() / f"{self.cluster}.json"

    def apply_env(self) -> list[str]:
        """Put the context's variables into this process's environment where unset; returns
        their names. They reach Ansible through the environment, never an argument."""
        added = [k for k in self.env if k not in os.environ]
        for name in added:
            os.environ[name] = self.env[name]
        return added


def save_context(context: SiteContext) -> Path:
    """Write the context, 0600 in a 0700 folder."""
    folder = context_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    path = context.path()
    atomic_write(path, json.dumps(asdict(context), indent=2) + "\n", mode=0o600)
    return path


def remove_context(
    cluster: str, written_by: str | None = None, *, path: Path | None = None
) -> bool:
    """Remove the cluster's context (at `path`, default where `load_context` looks), only one
    `written_by` wrote when given; a context that cannot be read is left alone."""
    path = path or context_dir() / f"{cluster}.json"
    try:
        context = _read_context(path, cluster)
    except UsageError:
        return False
    if context is None or (written_by is not None and context.written_by != written_by):
        return False
    path.unlink(missing_ok=True)
    return True


def load_context(cluster: str) -> SiteContext | None:
    """The cluster's context, or None when there is none. A context others may read or write,
    one that is not a regular file or not ours, or one that does not parse: UsageError."""
    return _read_context(context_dir() / f"{cluster}.json", cluster)


def _read_context(path: Path, cluster: str) -> SiteContext | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the cluster's context: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{path}: not a regular file")
        if info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise UsageError(
                f"{path}: holds secrets, so it must be yours and mode 0600 "
                f"(it is {stat.S_IMODE(info.st_mode):o}); chmod 600 it"
            )
        raw = handle.read(_MAX_BYTES + 1)
    if len(raw) > _MAX_BYTES:
        raise UsageError(f"{path}: larger than {_MAX_BYTES} bytes; not a context")
    try:
        data: Any = load_json(raw, f"{path}: not a cluster context")
        if not isinstance(data, dict) or data.get("cluster") != cluster:
            raise ValueError(f"not the context of cluster {cluster}")
        env = data.get("env") or {}
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise ValueError("env holds names and strings only")
        known = {f for f in SiteContext.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown keys {', '.join(unknown)}")
        return SiteContext(**data)
    except (ValueError, TypeError, AttributeError) as exc:
        raise UsageError(f"{path}: not a cluster context: {exc}") from None


@dataclass(frozen=True)
class Reach:
    """The options a workflow runs with: the command line's, else the context's."""

    inventory: Path | None
    ssh_config: Path | None
    slurm_via: str | None
    gate_workdir: Path | None
    context: Path | None
    bmc_insecure: bool = False
    bmc_scheme: str | None = None


def reach(
    cluster: str,
    *,
    inventory: Path | None = None,
    ssh_config: Path | None = None,
    slurm_via: str | None = None,
    gate_workdir: Path | None = None,
) -> Reach:
    """Fill what the command line left out from the cluster's context, and its environment."""
    context = load_context(cluster)
    if context is None:
        return Reach(inventory, ssh_config, slurm_via, gate_workdir, None)
    context.apply_env()

    def path(given: Path | None, kept: str | None) -> Path | None:
        return given if given is not None else (Path(kept) if kept else None)

    return Reach(
        inventory=path(inventory, context.inventory),
        ssh_config=path(ssh_config, context.ssh_config),
        slurm_via=slurm_via or context.slurm_via,
        gate_workdir=path(gate_workdir, context.gate_workdir),
        context=context.path(),
        bmc_insecure=context.bmc_insecure,
        bmc_scheme=context.bmc_scheme,
    )
