"""`srun --container-image` from the login node (issue 18, finding 7), on the converged lab.

The enroot_pyxis role, turned on as an operator would (`enroot_pyxis_enabled`), converges the
login node (the head, put in the `login` group) and one GPU node from the lab's releases: enroot's
.debs, pyxis' tag tarball (built on the node against Slurm's headers), NVIDIA's container
toolkit from the lab repository. Then a step submitted on the login node must run in the image
(its os-release), see the cluster's /etc/nccl.conf (the role's enroot mount), and have the GPU
node's nvidia-smi (enroot's GPU hook runs nvidia-container-cli). It fails where any of the three
traps is left: srun on a login node without pyxis refuses the option; without
libnvidia-container-tools the hook stops the container; without the mount the file is absent.

Issue 29: Slurm comes from SchedMD's packages in the converged lab, so pyxis is built against
slurm-smd-dev of the installed release (the distribution's libslurm-dev conflicts with it), enroot's
PMI and PyTorch hooks are enabled, and a plugin built for another Slurm release is taken out of the
plugin stack, with the role failing, instead of failing every step.

The lab's enroot, nvidia-container-cli and pyxis are simulations (cluster_lab/data/containers):
chroot containers from a plain-HTTP registry, in a mount namespace per task."""

from __future__ import annotations

import time
from collections.abc import Iterator
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


def _converge(
    converged: Converged, login_inventory: Path, data_dir: Path, hosts: str = f"{LOGIN},{NODE}"
) -> PlaybookResult:
    lab = converged.lab
    return run_playbook(
        REPO / "playbooks" / "phases" / "tools.yml",
        [lab.inventory, login_inventory],
        limit=hosts,
        tags="enroot_pyxis",
        extravars={"enroot_pyxis_enabled": True},
        private_data_dir=data_dir,
    )


@pytest.fixture(scope="module")
def pyxis(
    converged: Converged, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[PlaybookResult, Path]]:
    """The role turned on for the login node and NODE, converged once; afterwards the lab is as
    it was for the other tests: no pyxis in Slurm's plugin stack (srun and slurmstepd read it at
    each step) and no build of it left."""
    lab = converged.lab
    folder = tmp_path_factory.mktemp("pyxis")
    login_inventory = folder / "login.yml"
    login_inventory.write_text(
        yaml.safe_dump({"all": {"children": {"login": {"hosts": {LOGIN: {}}}}}})
    )
    try:
        yield _converge(converged, login_inventory, folder / "ansible"), login_inventory
    finally:
        for host in (LOGIN, NODE):
            lab.ssh(host, f"rm -rf {PLUGSTACK} /opt/pyxis /usr/local/lib/slurm/spank_pyxis.so")


def test_srun_container_image_from_the_login_node_runs_the_image_with_gpus_and_nccl_settings(
    converged: Converged, pyxis: tuple[PlaybookResult, Path], tmp_path: Path
) -> None:
    started = time.monotonic()
    lab = converged.lab
    first, login_inventory = pyxis
    assert first.succeeded, (first.status, first.failed_hosts, first.unreachable_hosts)
    image = releases.image_ref(lab.config)  # type: ignore[arg-type]
    command = (
        "cat /etc/os-release; echo ---; cat /etc/nccl.conf; echo ---; "
        "test -e /usr/bin/nvidia-smi && echo nvidia-smi; echo NVIDIA=$NVIDIA_VISIBLE_DEVICES; "
        "grep -c ^SLURM_JOB_ID= /etc/environment"
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
    # image's environment reached the task. enroot's PMI hook (enabled by the role, pyxis'
    # Setup) wrote the step's SLURM_* settings into the container's environment once.
    assert tail.splitlines() == ["nvidia-smi", "NVIDIA=all", "1"], step.stdout
    # pyxis removed the step's container when the step ended.
    left = lab.ssh(NODE, "enroot list")
    assert left.returncode == 0 and left.stdout.strip() == "", (left.stdout, left.stderr)

    assert first.hosts[LOGIN].changed and first.hosts[NODE].changed, first.hosts

    # changed=0 on a second converge.
    second = _converge(converged, login_inventory, tmp_path / "ansible")
    assert second.succeeded, (second.status, second.failed_hosts)
    changed = [(e.host, e.task) for e in second.events if e.event == "runner_on_ok" and e.changed]
    assert second.changed_total == 0, changed
    print(f"containers test: {time.monotonic() - started:.1f} s")


# pyxis built against another Slurm's spank.h (the distribution's libslurm-dev under SchedMD's
# Slurm, or a build left from before an upgrade): SPANK_PLUGIN() stamps the headers' release into
# the plugin, and this one claims 21.08.5, Ubuntu 22.04's.
_WRONG_SLURM_BUILD = """set -e
d=$(ls -d /opt/pyxis/*-slurm-*/ | head -n 1)
rm -rf /tmp/other-slurm && mkdir -p /tmp/other-slurm && cp -r /usr/include/slurm /tmp/other-slurm/
sed -i 's/^#define SLURM_VERSION_NUMBER .*/#define SLURM_VERSION_NUMBER 0x150805/' \
    /tmp/other-slurm/slurm/slurm_version.h
gcc -O2 -std=gnu11 -fPIC -shared -I/tmp/other-slurm -o "$d/spank_pyxis.so" "$d/pyxis.c"
cp "$d/spank_pyxis.so" /usr/local/lib/slurm/spank_pyxis.so
"""


def test_pyxis_built_for_another_slurm_is_taken_out_of_the_plugin_stack_and_the_role_fails(
    converged: Converged, pyxis: tuple[PlaybookResult, Path], tmp_path: Path
) -> None:
    lab = converged.lab
    first, login_inventory = pyxis
    assert first.succeeded, (first.status, first.failed_hosts)
    assert (
        lab.ssh(
            NODE,
            f"cat > /tmp/wrong-slurm.sh <<'EOF'\n{_WRONG_SLURM_BUILD}EOF\n"
            "sh /tmp/wrong-slurm.sh && test -e " + PLUGSTACK,
        ).returncode
        == 0
    )
    # What the trap does: slurmstepd refuses the `required` plugin, and every step fails (srun
    # 22.05 may still exit 0: the task never ran).
    refused = lab.ssh(LOGIN, f"srun -N1 -w {NODE} -t 1 echo ran", timeout=120)
    assert "ran" not in refused.stdout.split(), refused.stdout
    assert "Plugin initialization failed" in refused.stderr, refused.stderr

    result = _converge(converged, login_inventory, tmp_path / "ansible", hosts=NODE)
    assert not result.succeeded
    messages = [e.message or "" for e in result.events if e.failed]
    assert any(
        "spank_pyxis.so was built for Slurm 21.08.5 and this host runs Slurm 22.05.8" in m
        for m in messages
    ), messages
    # Taken out of the plugin stack: steps run again, without containers.
    assert lab.ssh(NODE, f"test ! -e {PLUGSTACK}").returncode == 0
    step = lab.ssh(LOGIN, f"srun -N1 -w {NODE} -t 1 hostname", timeout=120)
    assert step.returncode == 0 and step.stdout.strip() == NODE, (step.stdout, step.stderr)
