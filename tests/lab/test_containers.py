"""`srun --container-image` from the login node (issue 18, finding 7), on the converged lab.

The enroot_pyxis role, turned on as an operator would (`enroot_pyxis_enabled`), converges the
login node (the head, put in the `login` group) and one GPU node from the lab's releases: enroot's
.debs, pyxis' tag tarball (built on the node against Slurm's headers), NVIDIA's container
toolkit from the lab repository. Then a step submitted on the login node must run in the image
(its os-release), see the cluster's /etc/nccl.conf (the role's enroot mount), and have the GPU
node's nvidia-smi (enroot's GPU hook runs nvidia-container-cli). It fails where any of the three
traps is left: srun on a login node without pyxis refuses the option; without
libnvidia-container-tools the hook stops the container; without the mount the file is absent.

The lab's enroot, nvidia-container-cli and pyxis are simulations (cluster_lab/data/containers):
chroot containers from a plain-HTTP registry, in a mount namespace per task."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from cluster_lab import releases
from cluster_tool.ansible.runner import PlaybookResult, run_playbook
from tests.conftest import REPO
from tests.lab.conftest import Converged

pytestmark = pytest.mark.converged

LOGIN, NODE = "head", "gpu002"
PLUGSTACK = "/etc/slurm/plugstack.conf.d/pyxis.conf"


def _converge(converged: Converged, login_inventory: Path, data_dir: Path) -> PlaybookResult:
    lab = converged.lab
    return run_playbook(
        REPO / "playbooks" / "phases" / "tools.yml",
        [lab.inventory, login_inventory],
        limit=f"{LOGIN},{NODE}",
        tags="enroot_pyxis",
        extravars={"enroot_pyxis_enabled": True},
        private_data_dir=data_dir,
    )


def test_srun_container_image_from_the_login_node_runs_the_image_with_gpus_and_nccl_settings(
    converged: Converged, tmp_path: Path
) -> None:
    started = time.monotonic()
    lab = converged.lab
    login_inventory = tmp_path / "login.yml"
    login_inventory.write_text(
        yaml.safe_dump({"all": {"children": {"login": {"hosts": {LOGIN: {}}}}}})
    )
    try:
        first = _converge(converged, login_inventory, tmp_path / "ansible")
        assert first.succeeded, (first.status, first.failed_hosts, first.unreachable_hosts)
        image = releases.image_ref(lab.config)  # type: ignore[arg-type]
        command = (
            "cat /etc/os-release; echo ---; cat /etc/nccl.conf; echo ---; "
            "test -e /usr/bin/nvidia-smi && echo nvidia-smi; echo NVIDIA=$NVIDIA_VISIBLE_DEVICES"
        )
        step = lab.ssh(
            LOGIN,
            f"srun -N1 -w {NODE} -t 2 --container-image={image} sh -c '{command}'",
            timeout=180,
        )
        assert step.returncode == 0, (step.stdout, step.stderr)
        os_release, nccl, tail = step.stdout.split("---\n")
        assert "ID=lab-busybox" in os_release.splitlines(), step.stdout
        on_node = lab.ssh(NODE, "cat /etc/nccl.conf")
        assert on_node.returncode == 0 and "NCCL_" in on_node.stdout, on_node.stderr
        assert nccl == on_node.stdout, (nccl, on_node.stdout)
        # The GPU hook ran nvidia-container-cli: the image has no nvidia-smi of its own; the
        # image's environment reached the task.
        assert tail.splitlines() == ["nvidia-smi", "NVIDIA=all"], step.stdout
        # pyxis removed the step's container when the step ended.
        left = lab.ssh(NODE, "enroot list")
        assert left.returncode == 0 and left.stdout.strip() == "", (left.stdout, left.stderr)

        assert first.hosts[LOGIN].changed and first.hosts[NODE].changed, first.hosts

        # changed=0 on a second converge.
        second = _converge(converged, login_inventory, tmp_path / "ansible")
        assert second.succeeded, (second.status, second.failed_hosts)
        changed = [
            (e.host, e.task) for e in second.events if e.event == "runner_on_ok" and e.changed
        ]
        assert second.changed_total == 0, changed
    finally:
        # As the lab was for the other tests: no pyxis in Slurm's plugin stack (srun and
        # slurmstepd read it at each step).
        for host in (LOGIN, NODE):
            lab.ssh(host, f"rm -f {PLUGSTACK}")
    print(f"containers test: {time.monotonic() - started:.1f} s")
