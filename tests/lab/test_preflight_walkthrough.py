"""README's real-hardware walk-through against the lab run as if it were hardware (issue 33): a
fresh context made with `context set` from the lab's SSH config and shared folder (no
lab-specific option), then `preflight` passes, holding each GPU node's RDMA devices, CPUs and
memory to the lab spec's profile; a node altered to differ (one RDMA device renamed in its
sysfs) fails it with exit 2 naming the node, the rail and both names."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import REPO
from tests.lab.conftest import LabHandle

CLI = [str(REPO / ".venv" / "bin" / "cluster-tool")]


def _cli(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any], str]:
    """Exit code, the --json document (empty without --json) and stderr."""
    proc = subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )
    data = json.loads(proc.stdout) if "--json" in args else {}
    return proc.returncode, data, proc.stderr


def test_readme_walkthrough_reaches_a_passing_preflight_and_a_renamed_hca_fails_it(
    lab: LabHandle, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "CLUSTER_TOOL_CONTEXT_DIR": str(tmp_path / "contexts"),  # a newcomer's: none yet
        "CLUSTER_TOOL_SLURMDBD_PASSWORD": "a-walkthrough-password",
    }
    shared = str(lab.config.shared_dir)  # type: ignore[attr-defined]
    rc, _, err = _cli(
        env, "context", "set", str(lab.spec), "--ssh-config", str(lab.ssh_config),
        "--slurm-via", "head", "--workdir", shared, "--env", "CLUSTER_TOOL_SLURMDBD_PASSWORD",
    )  # fmt: skip
    assert rc == 0, err
    rc, data, err = _cli(env, "preflight", str(lab.spec), "--no-slurm", "--json")
    assert rc == 0, (err, data)
    assert data["checked"]["ssh"] == "5 of 5 hosts answered"
    assert data["checked"]["hardware"].startswith(
        "gpu[001-004] against profile lab-h100-8x-hdr: matches"
    )
    assert data["checked"]["gate folder"] == f"{shared} shared with gpu001"

    sysfs = Path(lab.config.nodes_dir) / "gpu003" / "sysfs-class" / "infiniband"  # type: ignore[attr-defined]
    (sysfs / "mlx5_3").rename(sysfs / "mlx5_12")
    try:
        rc, data, err = _cli(env, "preflight", str(lab.spec), "--no-slurm", "--json")
    finally:
        (sysfs / "mlx5_12").rename(sysfs / "mlx5_3")
    assert rc == 2, (err, data)
    (problem,) = data["problems"]
    assert problem["text"].startswith(
        "gpu003 (profile lab-h100-8x-hdr): rail-1 HCA mlx5_3: the node names the HCA at "
        "0000:40:00.0 mlx5_12"
    )
