"""The lab agent: turns BMC power changes into node stops, boots and re-images.

Run by `lab up` as `python -m cluster_lab.agent CONFIG_JSON`. Every sushy emulator
posts each change of its system to the agent (external notifier), a power request included.
The fake driver applies a power action lazily, 1-11 s after the request, on the next read of
the system, so the agent reads the systems too: every second for `BUSY_S` after a
notification (what makes a requested restart actually happen when nobody else reads the
state), every `IDLE_POLL_S` otherwise. An idle lab's BMC emulators then cost little CPU (they
took a seventh of a core at one read per second per node).

Power Off stops the node; power On boots it; On with the boot override target `Pxe`
boots it from a wiped overlay (re-image) and then sets the target back to `Hdd`, as a
one-time override does on a real BMC. A node the model marks dead (`lab inject node-down`)
stays dark whatever its BMC is asked: the operating system never comes back.
"""

from __future__ import annotations

import json
import logging
import queue
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cluster_lab import bmc, fabric, lifecycle
from cluster_lab import model as hw
from cluster_lab.config import LabConfig
from cluster_lab.sim.hw import node_hardware
from cluster_lab.sim.sysfs import write_sysfs_tree
from cluster_tool.errors import ClusterToolError

log = logging.getLogger("cluster_lab.agent")

BUSY_S = 30.0  # past the fake driver's longest delay (11 s), with room for a slow reader
IDLE_POLL_S = 10.0


class Agent:
    def __init__(self, config: LabConfig) -> None:
        self.config = config
        self.events: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        self.power: dict[str, str] = {}  # what the agent last applied, per node
        self.flapped: dict[tuple[str, str], tuple[int, int]] = {}  # ibsim LinkDowned set, per HCA
        self.busy_until = time.monotonic() + BUSY_S  # read often until the lab has settled
        self._model: tuple[tuple[int, int, int], hw.HardwareModel] | None = None

    def notify(self, node: str, system: dict[str, Any]) -> None:
        self.busy_until = time.monotonic() + BUSY_S
        self.events.put((node, system))

    def model(self) -> hw.HardwareModel:
        """The lab model, parsed again only when its file was replaced (it is, atomically)."""
        st = hw.model_path(self.config.model_dir).stat()
        seen = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._model is None or self._model[0] != seen:
            self._model = (seen, hw.load(self.config.model_dir))
        return self._model[1]

    def poll_forever(self) -> None:
        last_read = 0.0
        while True:
            try:
                current = self.model()
            except (ClusterToolError, OSError):
                time.sleep(1)
                continue
            self.sync_flaps(current)
            now = time.monotonic()
            if self.due(now, last_read):
                last_read = now
                self.read_bmcs(current)
            time.sleep(1)

    def due(self, now: float, last_read: float) -> bool:
        """Read the BMCs now: within BUSY_S of a notification, or IDLE_POLL_S after the last."""
        return now < self.busy_until or now - last_read >= IDLE_POLL_S

    def read_bmcs(self, current: hw.HardwareModel) -> None:
        """Read every node's system from its emulator (which applies a pending power action)
        and hand its state to the worker."""
        for node in current.nodes:
            if not node.bmc_address:
                continue
            try:
                system = bmc.get_system(node.bmc_address, current.lab, node.name)
            except ClusterToolError:
                continue
            # Reading is also what applies a pending power action in the emulator.
            boot = system.get("Boot")
            target = boot.get("BootSourceOverrideTarget") if isinstance(boot, dict) else None
            self.events.put(
                (node.name, {"power_state": system.get("PowerState"), "boot_device": target})
            )

    def sync_flaps(self, current: hw.HardwareModel) -> None:
        """lab fault link-flap: ibsim's LinkDownedCounter at both ends of a flapping cable,
        and the node's own in its sysfs tree, climb with the flaps the kernel log shows
        (checked every second)."""
        now = time.time()
        data: dict[str, Any] | None = None
        for node in current.nodes:
            for hca in node.hcas:
                if not float(getattr(hca, "flap_period", 0) or 0):
                    continue
                key = (node.name, hca.device)
                if self.flapped.get(key) == fabric.link_downed(hca, now):
                    continue
                data = data or current.model_dump(mode="json")
                tree = self.config.nodes_dir / node.name / "sysfs-class"
                write_sysfs_tree(node_hardware(data, node.name), tree, now=now)
                try:
                    self.flapped[key] = fabric.set_link_downed(self.config, node.name, hca, now)
                except ClusterToolError:
                    log.exception("link-flap counters of %s %s", node.name, hca.device)

    def work_forever(self) -> None:
        while True:
            node, system = self.events.get()
            try:
                self.apply(node, system)
            except Exception:  # keep serving the other nodes; the log says what failed
                log.exception("applying %s for %s failed", system.get("power_state"), node)

    def apply(self, node: str, system: dict[str, Any]) -> None:
        power = system.get("power_state")
        if power not in ("On", "Off"):
            return
        last = self.power.get(node, "On")
        if power == last:
            return
        if power == "Off":
            log.info("%s: power off", node)
            lifecycle.power_off_node(self.config, node)
        elif self._dead(node):
            log.info("%s: power on, but the node is dead (lab fault node-down): stays dark", node)
        else:
            reimage = system.get("boot_device") == "Pxe"
            log.info("%s: power on%s", node, " from PXE (re-image)" if reimage else "")
            lifecycle.power_on_node(self.config, node, reimage=reimage)
            if reimage:
                current = hw.load(self.config.model_dir)
                address = current.node(node).bmc_address
                if address:
                    bmc.set_boot_target(address, current.lab, node, "Hdd")
        self.power[node] = power

    def _dead(self, node: str) -> bool:
        try:
            current = hw.load(self.config.model_dir)
            return bool(getattr(current.node(node), "down", False))
        except (ClusterToolError, KeyError):
            return False


def serve(config: LabConfig) -> None:
    agent = Agent(config)

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:  # the sushy external notifier uses PUT
            self._receive()

        def do_POST(self) -> None:
            self._receive()

        def _receive(self) -> None:
            parts = self.path.strip("/").split("/")
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b"{}"
            if len(parts) != 2 or parts[0] != "notify":
                self.send_response(404)
                self.end_headers()
                return
            try:
                system = json.loads(body)
            except ValueError:
                self.send_response(400)
                self.end_headers()
                return
            agent.notify(parts[1], system if isinstance(system, dict) else {})
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

    server = ThreadingHTTPServer((config.host_address, config.agent_port), Handler)
    threading.Thread(target=agent.work_forever, daemon=True).start()
    threading.Thread(target=agent.poll_forever, daemon=True).start()
    server.serve_forever()


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    config = lifecycle.config_from_json(json.loads(argv[0]))
    serve(config)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
