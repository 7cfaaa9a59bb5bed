"""The BMC path (Redfish through sushy): one-time PXE boot + power cycle to re-image a node."""

from cluster_tool.bmc.credentials import Credentials, bmc_credentials, load_vault
from cluster_tool.bmc.redfish import (
    Bmc,
    BmcError,
    SushyBmc,
    TlsPolicy,
    pxe_power_cycle,
    wait_power,
)

__all__ = [
    "Bmc",
    "BmcError",
    "Credentials",
    "SushyBmc",
    "TlsPolicy",
    "bmc_credentials",
    "load_vault",
    "pxe_power_cycle",
    "wait_power",
]
