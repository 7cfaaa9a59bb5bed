"""The subnet manager runs where the spec says and is the opensm role's (issue 18, finding 6).

The converged fixture purges the OpenSM `lab up` started on the head for the unconverged tests,
so after the bring-up the head's OpenSM is the one the fabric phase's opensm role installed,
configured and started as a service. `sminfo` asked from gpu001's mlx5_0 port (the lab host's
infiniband-diags in gpu001's network namespace, attached at that HCA in ibsim) must name a master
SM on the head's port at the role's primary priority (13; an OpenSM without the role's
opensm.conf answers 0)."""

from __future__ import annotations

import ipaddress
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from cluster_lab import fabric
from tests.lab.conftest import Converged

pytestmark = pytest.mark.converged

SMINFO = re.compile(
    r"sm lid (\d+) sm guid (0x[0-9a-f]+), activity count \d+ priority (\d+) state 3"
)


def test_sminfo_from_a_gpu_node_names_the_roles_opensm_on_the_specs_host(
    converged: Converged, tmp_path: Path
) -> None:
    started = time.monotonic()
    lab = converged.lab
    config = lab.config
    host = yaml.safe_load(lab.spec.read_text())["fabric"]["subnet_manager"]
    assert host == "head"
    installed = lab.ssh(host, "dpkg-query -W -f '${Status}' opensm opensm-ibsim")
    assert installed.stdout.count("install ok installed") == 2, installed.stdout
    service = lab.ssh(host, f"service {fabric.SM_SERVICE} status")
    assert service.returncode == 0, (service.stdout, service.stderr)
    unit = lab.ssh(host, f"grep -h '^ExecStart=' /lib/systemd/system/{fabric.SM_SERVICE}.service")
    assert "opensm-ibsim" in unit.stdout, unit.stderr
    conf = lab.ssh(host, "cat /etc/opensm/opensm.conf").stdout.splitlines()
    assert {"routing_engine ftree,updn", "sm_priority 13"} <= set(conf), conf
    # The head's own port, where its OpenSM attaches (its diags attach there too).
    own = lab.ssh(host, "ibaddr")
    assert own.returncode == 0, own.stderr
    port = re.search(r"GID (\S+) LID start (0x[0-9a-f]+)", own.stdout)
    assert port, own.stdout
    head_guid = int.from_bytes(ipaddress.IPv6Address(port.group(1)).packed[8:], "big")
    head_lid = int(port.group(2), 16)
    asked = subprocess.run(
        [
            "ip", "netns", "exec", config.netns("gpu001"),  # type: ignore[attr-defined]
            "env", f"IBSIM_SERVER_NAME={config.ibsim_address}",  # type: ignore[attr-defined]
            "SIM_HOST=gpu001 mlx5_0", f"LD_PRELOAD={fabric.UMAD2SIM}",
            "timeout", "30", "sminfo",
        ],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    sm = SMINFO.search(asked.stdout)
    assert sm and "SMINFO_MASTER" in asked.stdout, asked.stdout
    lid, guid, priority = sm.groups()
    assert (int(lid), int(guid, 16), priority) == (head_lid, head_guid, "13"), (
        asked.stdout,
        own.stdout,
    )
    print(f"subnet-manager test: {time.monotonic() - started:.1f} s")
