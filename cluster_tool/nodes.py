"""Which GPU nodes an operator means: a hostlist from the command line read against the spec's
GPU nodes, in the spec's order, or a one-line usage error. Every command that takes `--nodes`
asks here, so they all accept and refuse the same hostlists in the same words."""

from __future__ import annotations

from collections.abc import Collection

from ClusterShell.NodeSet import NodeSet

from cluster_tool.bounds import expand_hostlist
from cluster_tool.errors import UsageError
from cluster_tool.spec.models import Cluster


def select_gpu_nodes(
    cluster: Cluster,
    hostlist: str | None,
    option: str = "--nodes",
    *,
    also: Collection[str] = (),
) -> list[str]:
    """The GPU nodes of `hostlist` in spec order (every GPU node when it is None). UsageError,
    one line under `option`, for text that is not a hostlist (or expands past the bound) and
    for hosts that are not GPU nodes of the cluster. Hosts in `also` are let through, after the
    GPU nodes, for a caller that refuses them in its own words (reimage: the controller)."""
    gpu = [n.name for n in cluster.gpu_nodes()]
    if hostlist is None:
        return gpu
    wanted = set(expand_hostlist(hostlist, option))
    strangers = wanted - set(gpu) - set(also)
    if strangers:
        raise UsageError(
            f"{option}: not GPU nodes of {cluster.name}: {NodeSet.fromlist(sorted(strangers))}"
        )
    kept = [n for n in dict.fromkeys(also) if n in wanted and n not in gpu]
    return [n for n in gpu if n in wanted] + kept
