"""The lab's BMCs: one sushy-tools Redfish emulator per node that has a BMC in the spec.

Each emulator serves one fake system (power state, power actions, boot override) at the
node's `bmc_address` and tells the lab agent of every change through its external
notifier; the agent turns a power cycle into a node restart, and a power cycle with a
PXE boot override into a re-image (see `cluster_lab.agent`).
"""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from pathlib import Path
from urllib.request import Request, urlopen

from cluster_lab.config import LabConfig
from cluster_lab.host import LabError, ProcRef, spawn
from cluster_tool.errors import UsageError


def system_uuid(lab: str, node: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{lab}.{node}.bmc"))


def split_address(bmc_address: str) -> tuple[str, int]:
    """`10.77.0.1:8001` -> ("10.77.0.1", 8001); a bare address means port 443 is not served."""
    host, _, port = bmc_address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(
            f"lab BMC address {bmc_address!r}: the lab serves Redfish over HTTP as HOST:PORT"
        )
    return host, int(port)


def redfish_root(bmc_address: str) -> str:
    host, port = split_address(bmc_address)
    return f"http://{host}:{port}"


def bmc_dir(config: LabConfig) -> Path:
    return config.lab_dir / "bmc"


def emulator_config(config: LabConfig, lab: str, node: str, address: str, bmc: str) -> str:
    host, port = split_address(bmc)
    state_dir = bmc_dir(config) / f"state-{node}"
    system = {
        "uuid": system_uuid(lab, node),
        "name": node,
        "power_state": "On",
        "external_notifier": True,
        "nics": [{"mac": _mac(lab, node), "ip": address}],
    }
    # The emulator reads this file as Python; every value is a literal.
    return "\n".join(
        [
            f"# lab {lab}: the BMC of {node}",
            f"SUSHY_EMULATOR_LISTEN_IP = {host!r}",
            f"SUSHY_EMULATOR_LISTEN_PORT = {port!r}",
            "SUSHY_EMULATOR_FAKE_DRIVER = True",
            f"SUSHY_EMULATOR_FAKE_SYSTEMS = {[system]!r}",
            f"SUSHY_EMULATOR_STATE_DIR = {str(state_dir)!r}",
            f"EXTERNAL_NOTIFICATION_URL = "
            f"{f'http://{config.host_address}:{config.agent_port}/notify/{node}'!r}",
            "",
        ]
    )


def _mac(lab: str, node: str) -> str:
    digest = uuid.uuid5(uuid.NAMESPACE_DNS, f"{lab}.{node}.mac").bytes
    return "02:" + ":".join(f"{b:02x}" for b in digest[:5])


def start_emulator(config: LabConfig, lab: str, node: str, address: str, bmc: str) -> ProcRef:
    directory = bmc_dir(config)
    directory.mkdir(parents=True, exist_ok=True)
    state_dir = directory / f"state-{node}"
    if state_dir.exists():
        shutil.rmtree(state_dir)
    conf = directory / f"{node}.conf"
    conf.write_text(emulator_config(config, lab, node, address, bmc))
    emulator = Path(sys.executable).with_name("sushy-emulator")
    if not emulator.exists():
        raise UsageError("sushy-emulator is not installed (pip install -e '.[lab]')")
    return spawn([str(emulator), "--config", str(conf)], log=config.log_dir / f"bmc-{node}.log")


def get_system(bmc: str, lab: str, node: str, timeout: float = 3.0) -> dict[str, object]:
    """The Redfish ComputerSystem of a node, read straight from its emulator."""
    url = f"{redfish_root(bmc)}/redfish/v1/Systems/{system_uuid(lab, node)}"
    try:
        with urlopen(url, timeout=timeout) as resp:
            data = json.load(resp)
    except OSError as exc:
        raise LabError(f"BMC of {node} at {bmc}: {exc}") from exc
    return data if isinstance(data, dict) else {}


def set_boot_target(bmc: str, lab: str, node: str, target: str) -> None:
    url = f"{redfish_root(bmc)}/redfish/v1/Systems/{system_uuid(lab, node)}"
    body = json.dumps({"Boot": {"BootSourceOverrideTarget": target}}).encode()
    request = Request(url, data=body, method="PATCH", headers={"Content-Type": "application/json"})
    try:
        with urlopen(request, timeout=5):
            pass
    except OSError as exc:
        raise LabError(f"BMC of {node} at {bmc}: {exc}") from exc
