"""Redfish through sushy: the one-time PXE boot override and the power cycle that re-image a node,
and its power state. TLS is verified unless the caller explicitly turned it off."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from cluster_tool.bmc.credentials import Credentials
from cluster_tool.errors import ClusterToolError, UsageError
from cluster_tool.polling import poll_delays


class BmcError(ClusterToolError):
    """A BMC refused a request or could not be reached; the message names the node."""


def unanswered(urls: Mapping[str, str], timeout_s: float = 5.0) -> dict[str, str]:
    """Node -> why, for each BMC URL whose host takes no TCP connection on its port within
    `timeout_s`; all at once. Nothing is sent: no credentials, no Redfish request."""
    import socket
    from concurrent.futures import ThreadPoolExecutor
    from urllib.parse import urlsplit

    def one(item: tuple[str, str]) -> tuple[str, str | None]:
        node, url = item
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            with socket.create_connection((parts.hostname or "", port), timeout=timeout_s):
                return node, None
        except OSError as exc:
            return node, f"{parts.hostname}:{port}: {exc.strerror or exc}"

    if not urls:
        return {}
    with ThreadPoolExecutor(max_workers=min(64, len(urls))) as pool:
        answers = list(pool.map(one, urls.items()))
    return {node: why for node, why in answers if why is not None}


class Bmc(Protocol):
    """What re-imaging needs from a node's BMC."""

    def power_state(self, node: str) -> str: ...
    def set_pxe_once(self, node: str) -> None: ...
    def power_off(self, node: str) -> None: ...
    def power_on(self, node: str) -> None: ...


@dataclass(frozen=True)
class TlsPolicy:
    """How to talk to BMCs: https verified (default, optionally against a CA bundle), or not."""

    insecure: bool = False
    ca_bundle: str | None = None
    scheme: str = "https"

    def __post_init__(self) -> None:
        if self.scheme not in ("https", "http"):
            raise UsageError(f"--bmc-scheme: {self.scheme!r} is neither https nor http")
        if self.scheme == "http" and not self.insecure:
            raise UsageError(
                "--bmc-scheme http sends the BMC password unencrypted; add --insecure-bmc to accept"
            )
        if self.insecure and self.ca_bundle:
            raise UsageError("--ca-bundle and --insecure-bmc are exclusive")

    @property
    def verify(self) -> bool | str:
        if self.insecure:
            return False
        return self.ca_bundle or True

    def scheme_of(self, address: str) -> str:
        """The scheme a request to `address` goes out with; UsageError when this policy does
        not allow it (anything but https, and http without --insecure-bmc)."""
        if "://" not in address:
            return self.scheme
        scheme = address.split("://", 1)[0].lower()
        if scheme == "https":
            return scheme
        if scheme == "http" and self.insecure:
            return scheme
        if scheme == "http":
            raise UsageError(
                f"BMC address {address}: http sends the BMC password unencrypted; "
                "give https, or add --insecure-bmc to accept"
            )
        raise UsageError(f"BMC address {address}: {scheme}:// is not https")

    def url(self, address: str) -> str:
        """`https://ADDRESS` unless the address carries its own (allowed) scheme."""
        scheme = self.scheme_of(address)
        return address if "://" in address else f"{scheme}://{address}"

    def transport(self, addresses: Iterable[str]) -> str:
        """What the BMC requests will actually use, for the run record: `http` (no TLS: the
        password in clear) if any address goes over http, else `insecure` (TLS, certificate
        not checked), `ca-bundle` or `verified`. Refuses addresses the policy does not allow."""
        schemes = {self.scheme_of(address) for address in addresses} or {self.scheme}
        if "http" in schemes:
            return "http"
        if self.insecure:
            return "insecure"
        return "ca-bundle" if self.ca_bundle else "verified"


def _describe(exc: Exception) -> str:
    # sushy's errors can carry the request body; only the class and the first line are kept.
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0][:200]}" if first else type(exc).__name__


@dataclass
class SushyBmc:
    """Every node's BMC through sushy. `addresses` maps node -> BMC address (from the spec)."""

    addresses: Mapping[str, str]
    credentials: Credentials
    tls: TlsPolicy = field(default_factory=TlsPolicy)
    connect: Callable[..., Any] | None = None  # tests may hand another sushy connector
    # sushy retries a refused connection and a 5xx: a BMC that is busy rebooting answers later.
    retries: int = 3
    retry_delay_s: float = 2.0
    _systems: dict[str, Any] = field(default_factory=dict, repr=False)

    def _system(self, node: str) -> Any:
        if node in self._systems:
            return self._systems[node]
        import sushy

        address = self.addresses.get(node)
        if not address:
            raise BmcError(f"{node}: no BMC address in the spec")
        url = self.tls.url(address)  # refuses a scheme the policy does not allow
        try:
            conn = (self.connect or sushy.Sushy)(
                url,
                username=self.credentials.username,
                password=self.credentials.password,
                verify=self.tls.verify,
                server_side_retries=self.retries,
                server_side_retries_delay=self.retry_delay_s,
            )
            members = conn.get_system_collection().get_members()
        except Exception as exc:  # sushy raises its own and requests' errors
            raise BmcError(f"{node}: BMC at {address}: {_describe(exc)}") from None
        if not members:
            raise BmcError(f"{node}: BMC at {address} lists no system")
        # A node's BMC serves its own system; when it lists several, the one named like the node.
        system = next((m for m in members if getattr(m, "name", None) == node), members[0])
        self._systems[node] = system
        return system

    def power_state(self, node: str) -> str:
        system = self._system(node)
        try:
            system.refresh(force=True)
        except Exception as exc:
            raise BmcError(f"{node}: reading the power state: {_describe(exc)}") from None
        state = system.power_state
        # sushy gives an enum (PowerState.ON, value "On"); older versions gave the string.
        return str(getattr(state, "value", state) or "unknown")

    def set_pxe_once(self, node: str) -> None:
        import sushy

        system = self._system(node)
        try:
            system.set_system_boot_options(
                target=sushy.BOOT_SOURCE_TARGET_PXE, enabled=sushy.BOOT_SOURCE_ENABLED_ONCE
            )
        except Exception as exc:
            raise BmcError(
                f"{node}: the BMC refused a one-time PXE boot: {_describe(exc)}"
            ) from None

    def _reset(self, node: str, value: str, what: str) -> None:
        system = self._system(node)
        try:
            system.reset_system(value)
        except Exception as exc:
            raise BmcError(f"{node}: the BMC refused power {what}: {_describe(exc)}") from None

    def power_off(self, node: str) -> None:
        import sushy

        self._reset(node, sushy.RESET_FORCE_OFF, "off")

    def power_on(self, node: str) -> None:
        import sushy

        self._reset(node, sushy.RESET_ON, "on")


def wait_power(
    bmc: Bmc,
    node: str,
    want: str,
    timeout_s: float,
    *,
    poll_s: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Poll PowerState until it reads `want` (On/Off); BmcError after `timeout_s`."""
    deadline = clock() + timeout_s
    delays = poll_delays(poll_s)
    while True:
        state = bmc.power_state(node)
        if state.lower() == want.lower():
            return
        if clock() >= deadline:
            raise BmcError(
                f"{node}: power state still {state} after {timeout_s:.0f} s (want {want})"
            )
        sleep(next(delays))


def pxe_power_cycle(
    bmc: Bmc,
    node: str,
    *,
    timeout_s: float = 300.0,
    poll_s: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Re-image: a one-time PXE boot override, then off (waited for) and on (waited for).

    Off then on rather than a restart: some BMCs (and the emulator) apply a restart without the
    power ever reading Off, and the off state is what proves the node really went down."""
    bmc.set_pxe_once(node)
    if bmc.power_state(node).lower() != "off":
        bmc.power_off(node)
        wait_power(bmc, node, "Off", timeout_s, poll_s=poll_s, clock=clock, sleep=sleep)
    bmc.power_on(node)
    wait_power(bmc, node, "On", timeout_s, poll_s=poll_s, clock=clock, sleep=sleep)
