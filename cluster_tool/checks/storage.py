"""The node's storage against the spec: the shared filesystem and the local scratch mounted
where the spec says, from what it says, and the scratch with room for the next checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cluster_tool.findings import Finding
from cluster_tool.parsers.mounts import StorageReading
from cluster_tool.spec.models import Cluster
from cluster_tool.spec.thresholds import HealthThresholds

__all__ = ["ExpectedMount", "StorageExpectations", "check_storage", "storage_expectations"]


@dataclass(frozen=True)
class ExpectedMount:
    """One mount a GPU node must have: its role (`shared`, `scratch`), the path, the
    filesystem types that will do and the source (None: any)."""

    role: str
    path: str
    fstypes: tuple[str, ...]
    source: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "path": self.path,
            "fstypes": list(self.fstypes),
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: object) -> ExpectedMount:
        """One mount of a node file (text from a file: TypeError when it is not one)."""
        if not isinstance(data, dict) or not isinstance(data.get("fstypes"), list):
            raise TypeError(f"a storage entry is not a mount: {str(data)[:60]!r}")
        source = data.get("source")
        return cls(
            str(data["role"]),
            str(data["path"]),
            tuple(str(t) for t in data["fstypes"]),
            None if source is None else str(source),
        )


@dataclass(frozen=True)
class StorageExpectations:
    """The mounts of one GPU node, and which of them is the scratch whose space is judged."""

    mounts: tuple[ExpectedMount, ...] = ()

    @property
    def scratch(self) -> ExpectedMount | None:
        return next((m for m in self.mounts if m.role == "scratch"), None)


def storage_expectations(cluster: Cluster) -> StorageExpectations:
    """A GPU node's mounts from the spec's storage section (none without one)."""
    mounts: list[ExpectedMount] = []
    shared, scratch = cluster.storage.shared, cluster.storage.scratch
    if shared is not None:
        mounts.append(ExpectedMount("shared", shared.mount, shared.fstypes, shared.mount_source))
    if scratch is not None:
        mounts.append(ExpectedMount("scratch", scratch.mount, (scratch.filesystem,)))
    return StorageExpectations(tuple(mounts))


def _nfs_source(source: str) -> str:
    # The kernel shows an NFS source as the server as mounted and the path without a trailing /.
    return source.rstrip("/") or source


def check_storage(
    node: str, expect: StorageExpectations, reading: StorageReading, t: HealthThresholds
) -> list[Finding]:
    """`storage.mount` for a mount that is absent or is another filesystem than the spec's
    (both named), `storage.scratch-full` for a scratch below the spec's free-space shares."""
    findings: list[Finding] = []
    for want in expect.mounts:
        got = reading.mounted_at(want.path)
        expected = f"{'/'.join(want.fstypes)}" + (f" from {want.source}" if want.source else "")
        if got is None:
            findings.append(
                Finding(
                    check="storage.mount",
                    node=node,
                    component=want.path,
                    expected=f"{want.path} mounted ({expected})",
                    observed="not mounted",
                    message=f"{node}: the {want.role} filesystem is not mounted at {want.path} "
                    f"(expected {expected}); checkpoints written there would land on the "
                    "node's root disk",
                )
            )
            continue
        wrong_type = got.fstype not in want.fstypes
        wrong_source = want.source is not None and _nfs_source(got.source) != _nfs_source(
            want.source
        )
        if wrong_type or wrong_source:
            findings.append(
                Finding(
                    check="storage.mount",
                    node=node,
                    component=want.path,
                    expected=f"{want.path}: {expected}",
                    observed=f"{want.path}: {got.fstype} from {got.source}",
                    message=f"{node}: {want.path} is {got.fstype} from {got.source}; the spec's "
                    f"{want.role} filesystem is {expected}",
                )
            )
    scratch = expect.scratch
    if scratch is not None and reading.mounted_at(scratch.path) is not None:
        row = reading.space_at(scratch.path)
        if row is not None:
            findings += _scratch_space(node, scratch.path, row.free_pct, row.available_kib, t)
    return findings


def _scratch_space(
    node: str, path: str, free_pct: float, available_kib: int, t: HealthThresholds
) -> list[Finding]:
    if free_pct >= t.scratch_free_warn_pct:
        return []
    error = free_pct < t.scratch_free_min_pct
    limit = t.scratch_free_min_pct if error else t.scratch_free_warn_pct
    return [
        Finding(
            check="storage.scratch-full",
            severity="error" if error else "warning",
            node=node,
            component=path,
            expected=f"at least {limit:g} % free",
            observed=f"{free_pct:.1f} % free ({available_kib / 1024**2:.1f} GiB)",
            message=f"{node}: scratch {path} has {free_pct:.1f} % free "
            f"({available_kib / 1024**2:.1f} GiB), below {limit:g} %: the next checkpoint may "
            "not fit; clear old checkpoints already synced to the shared filesystem",
        )
    ]
