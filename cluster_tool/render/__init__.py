"""Rendering a cluster spec into an inventory folder, atomically and byte-for-byte repeatable.

Layout of the rendered folder (`inventory/<cluster>/` by default):

    hosts.yml                 Ansible YAML inventory: groups per role and per SU; host vars
                              ansible_host, bmc_address, su, index_in_su, node_profile
    group_vars/all.yml        cluster-wide variables: group names (`cluster_groups`), Slurm
                              hosts, pinned versions and repository URLs, NCCL environment,
                              thresholds; the spec's `ansible_vars` are merged in last
    cabling.csv               node,hca,gpu,rail,su,leaf,leaf_port (one row per compute HCA)
    switch-links.csv          leaf,leaf_port,spine,spine_port
    slurm/nodes.conf          NodeName and PartitionName lines (included from slurm.conf)
    slurm/gres.conf           GPU GRES with /dev/nvidia[0-7] and CPU affinity
    slurm/topology.conf       tree: one switch per SU under a spine-layer switch
    nccl.conf                 /etc/nccl.conf: NCCL_IB_HCA, NCCL_SOCKET_IFNAME, SHARP/CollNet
    nccl-tests/<coll>.sbatch  one sbatch script per collective (srun --mpi=pmix, 8 tasks/node)
    spec.json                 the validated spec with every default filled in

Text files come from the Jinja2 templates in `templates/render/` (their paths mirror the
output paths); the CSVs and JSON are written by code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cluster_tool.render.engine import (
        RenderResult,
        diff_rendered,
        render,
        render_files,
        render_nccl_conf,
        write_atomically,
    )

__all__ = [
    "RenderResult",
    "diff_rendered",
    "render",
    "render_files",
    "render_nccl_conf",
    "write_atomically",
]


def __getattr__(name: str) -> Any:
    # The engine (Jinja2, YAML) loads on first use: `spec check` and the fabric check read
    # only the cabling plan (cluster_tool.fabric).
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.engine"), name)
    globals()[name] = value
    return value
