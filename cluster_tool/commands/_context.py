"""How a command reaches its cluster: the command line's options, the rest from the cluster's
context (`cluster_tool.context`; `lab up` writes the lab's)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cluster_tool import output

if TYPE_CHECKING:
    from cluster_tool.context import Reach
    from cluster_tool.spec import Cluster


def reach_cluster(
    cluster: Cluster,
    inventory: Path | None = None,
    ssh_config: Path | None = None,
    slurm_via: str | None = None,
    gate_workdir: Path | None = None,
) -> Reach:
    """Options filled from the context, which is named on stderr so the operator sees where a
    run reaches the cluster from."""
    from cluster_tool.context import reach

    via = reach(
        cluster.name,
        inventory=inventory,
        ssh_config=ssh_config,
        slurm_via=slurm_via,
        gate_workdir=gate_workdir,
    )
    if via.context is not None:
        output.progress(f"cluster context: {via.context}")
    return via
