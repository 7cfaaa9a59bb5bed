"""The BMC path against the real sushy-tools Redfish emulator (fake driver, on localhost): the
same emulator the lab runs per node, so the requests and answers are the real ones."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster_tool.bmc import BmcError, Credentials, SushyBmc, TlsPolicy, pxe_power_cycle, wait_power
from cluster_tool.bmc.credentials import bmc_credentials
from cluster_tool.errors import UsageError
from cluster_tool.spec.models import BmcCredentials, SecretRef

EMULATOR = Path(sys.executable).with_name("sushy-emulator")
UUID = "8f2c8f2a-8a7b-4a0e-9a55-1f0c2b3d4e5f"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not EMULATOR.exists():
        pytest.fail("sushy-emulator is not installed (it is pinned in the lab extra)")
    root = tmp_path_factory.mktemp("bmc")
    port = _free_port()
    system = {"uuid": UUID, "name": "gpu001", "power_state": "On", "nics": []}
    conf = root / "emulator.conf"
    conf.write_text(
        "\n".join(
            [
                "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'",
                f"SUSHY_EMULATOR_LISTEN_PORT = {port}",
                "SUSHY_EMULATOR_FAKE_DRIVER = True",
                f"SUSHY_EMULATOR_FAKE_SYSTEMS = {[system]!r}",
                f"SUSHY_EMULATOR_STATE_DIR = {str(root / 'state')!r}",
                "",
            ]
        )
    )
    log = (root / "emulator.log").open("w")
    proc = subprocess.Popen(
        [str(EMULATOR), "--config", str(conf)], stdout=log, stderr=subprocess.STDOUT
    )
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://{address}/redfish/v1/Systems", timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"sushy-emulator did not start: {(root / 'emulator.log').read_text()}")
            time.sleep(0.2)
    try:
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _system(address: str) -> dict[str, object]:
    with urllib.request.urlopen(f"http://{address}/redfish/v1/Systems/{UUID}", timeout=5) as r:
        data = json.load(r)
    assert isinstance(data, dict)
    return data


CREDS = Credentials("admin", "s3cret-bmc-password")


def test_pxe_power_cycle_sets_a_one_time_pxe_boot_and_comes_back_on(emulator: str) -> None:
    bmc = SushyBmc({"gpu001": emulator}, CREDS, TlsPolicy(insecure=True, scheme="http"))
    pxe_power_cycle(bmc, "gpu001", timeout_s=20, poll_s=0.1)
    system = _system(emulator)
    boot = system["Boot"]
    assert isinstance(boot, dict)
    assert boot["BootSourceOverrideTarget"] == "Pxe"
    assert bmc.power_state("gpu001") == "On"


def test_power_off_is_read_back_as_off(emulator: str) -> None:
    bmc = SushyBmc({"gpu001": emulator}, CREDS, TlsPolicy(insecure=True, scheme="http"))
    bmc.power_off("gpu001")
    # The emulator applies a power action on a later read, as a slow BMC does: poll for it.
    wait_power(bmc, "gpu001", "Off", 20, poll_s=0.1)
    bmc.power_on("gpu001")
    wait_power(bmc, "gpu001", "On", 20, poll_s=0.1)
    assert bmc.power_state("gpu001") == "On"


def test_an_unreachable_bmc_is_a_bmc_error_naming_the_node_not_the_password() -> None:
    bmc = SushyBmc(
        {"gpu009": f"127.0.0.1:{_free_port()}"},
        CREDS,
        TlsPolicy(insecure=True, scheme="http"),
        retries=1,
        retry_delay_s=0.01,
    )
    with pytest.raises(BmcError, match="gpu009") as info:
        bmc.set_pxe_once("gpu009")
    assert CREDS.password not in str(info.value)


def test_https_verifies_certificates_unless_explicitly_insecure() -> None:
    assert TlsPolicy().verify is True
    assert TlsPolicy().url("10.0.0.5") == "https://10.0.0.5"
    assert TlsPolicy(ca_bundle="/etc/ssl/bmc.pem").verify == "/etc/ssl/bmc.pem"
    assert TlsPolicy(insecure=True).verify is False
    with pytest.raises(UsageError, match="insecure-bmc"):
        TlsPolicy(scheme="http")
    with pytest.raises(UsageError, match="exclusive"):
        TlsPolicy(insecure=True, ca_bundle="/x.pem")


def test_credentials_resolve_from_the_environment_and_never_show_the_password() -> None:
    refs = BmcCredentials(username=SecretRef(env="BMC_USER"), password=SecretRef(env="BMC_PASS"))
    creds = bmc_credentials(refs, {"BMC_USER": "admin", "BMC_PASS": "hunter2-long"})
    assert creds.username == "admin"
    assert "hunter2-long" not in repr(creds) and "hunter2-long" not in str(creds)
    with pytest.raises(UsageError, match="BMC_PASS is not set"):
        bmc_credentials(refs, {"BMC_USER": "admin"})


def test_vault_reference_without_a_vault_says_what_to_give() -> None:
    refs = BmcCredentials(username=SecretRef(vault="bmc_user"), password=SecretRef(vault="bmc_pw"))
    with pytest.raises(UsageError, match="--vault-file"):
        bmc_credentials(refs, {})
    creds = bmc_credentials(refs, {}, {"bmc_user": "root", "bmc_pw": "from-the-vault"})
    assert creds.password == "from-the-vault"


class _RecordingSystem:
    """A sushy system that records the boot options asked of it."""

    name = "gpu001"

    def __init__(self) -> None:
        self.boot: dict[str, object] = {}

    def set_system_boot_options(self, **kwargs: object) -> None:
        self.boot = kwargs


def test_the_pxe_override_is_one_time_not_continuous() -> None:
    # The emulator always reports "Continuous" whatever was asked, so the request is checked here.
    import sushy

    bmc = SushyBmc({"gpu001": "10.0.0.1"}, CREDS)
    system = _RecordingSystem()
    bmc._systems["gpu001"] = system
    bmc.set_pxe_once("gpu001")
    assert system.boot == {
        "target": sushy.BOOT_SOURCE_TARGET_PXE,
        "enabled": sushy.BOOT_SOURCE_ENABLED_ONCE,
    }
