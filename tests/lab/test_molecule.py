"""The roles' molecule scenarios (delegated driver: a lab of their own, brought up by
playbooks/molecule/lab-create.yml) run whole: destroy, create, converge, idempotence, verify,
destroy. Each scenario's lab sits on its own subnet and prefix, beside the session's test lab."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.lab.conftest import require_root

# Not the demo lab's 10.77.0 nor the test lab's 10.79.0.
MOLECULE_NET = os.environ.get("CLUSTER_TOOL_TEST_MOLECULE_NET", "10.78.0")
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# One to two minutes each; in `make test`, and alone in `make lab-molecule`.
pytestmark = pytest.mark.molecule


# GPU nodes in each scenario's lab.
GPU_NODES = {"nvidia_driver": 1, "slurm": 2}


@pytest.mark.parametrize("role", sorted(GPU_NODES))
def test_the_roles_molecule_scenario_converges_is_idempotent_and_verifies(
    role: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    require_root()
    data = yaml.safe_load((REPO / "examples" / "lab.yml").read_text())
    # A smaller lab than the session's: a role's scenario proves it converges from bare and
    # changes nothing on a second run, which one GPU node shows for the driver and two (a job
    # across nodes) for Slurm. The four-node cluster is the converged tests', with every role.
    # Fewer nodes converging at once keeps both scenarios inside CI's time on two cores.
    gpu_nodes = GPU_NODES[role]
    for group in data["nodes"]:
        if str(group["hosts"]).startswith("gpu"):
            group["hosts"] = f"gpu[001-{gpu_nodes:03d}]"
        # The scenarios keep Debian 12 with its own Slurm (22.05) covered; the session's converged
        # lab runs the path most H100 sites take (Ubuntu 22.04, SchedMD's packages).
        group["os"] = "debian12"
    data["slurm"]["packages"] = "distribution"
    data["slurm"].pop("repository", None)
    data["software"].pop("slurm_version", None)
    scenario = REPO / "roles" / role / "molecule" / "default" / "molecule.yml"
    platforms = yaml.safe_load(scenario.read_text())
    expected = ["head", *(f"gpu{n:03d}" for n in range(1, gpu_nodes + 1))]
    assert [p["name"] for p in platforms["platforms"]] == expected, "molecule.yml's platforms"
    spec = tmp_path / "lab.yml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False).replace("10.77.0.", f"{MOLECULE_NET}."))
    lab_dir = Path(tempfile.mkdtemp(prefix=f"ctm-{role}-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(lab_dir, ignore_errors=True))
    env = dict(os.environ)
    env.update(
        {
            "PATH": f"{REPO / '.venv' / 'bin'}:{env.get('PATH', '')}",
            # Short: molecule's ansible.cfg puts SSH control sockets at <labdir>/ssh/cm/%h-%p-%r,
            # and a socket path over 107 bytes fails every host as unreachable.
            "MOLECULE_LAB_DIR": str(lab_dir),
            "MOLECULE_LAB_PREFIX": "ctm",
            "MOLECULE_LAB_SUBNET": f"{MOLECULE_NET}.0/24",
            "MOLECULE_LAB_SPEC": str(spec),
            # Its own cluster contexts: the scenario's lab (also named `lab`) neither reads nor
            # replaces the session lab's.
            "CLUSTER_TOOL_CONTEXT_DIR": str(lab_dir / "contexts"),
        }
    )
    proc = subprocess.run(
        ["molecule", "test"],
        cwd=REPO / "roles" / role,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    out = ANSI.sub("", proc.stdout + proc.stderr)
    assert proc.returncode == 0, out[-4000:]
    for action in ("converge", "idempotence", "verify", "destroy"):
        assert re.search(rf"{action}: Executed: Successful", out), action
    left = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "ctm" not in left, "the scenario's destroy left the lab's links behind"
