"""Fakes for the workflows that behave like the real edges: a Slurm that answers the client
commands in their real formats (jobs keep a drained node DRAINING until they end), and a BMC that
applies power actions on a later read, as the sushy-tools emulator's fake driver does."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from ClusterShell.NodeSet import NodeSet

from cluster_tool.admission import WORKFLOW_SUITES, NodeProof, prove
from cluster_tool.bmc.redfish import BmcError
from cluster_tool.drains import is_ours
from cluster_tool.findings import Finding
from cluster_tool.registry import FABRIC_CHECKS, GATE_CHECKS, NODE_CHECKS, VERSION_CHECKS
from cluster_tool.slurm import AdminSlurm, SlurmError
from cluster_tool.verdicts import GateProof, NodeVerdict


@dataclass
class SlurmCluster:
    """Answers scontrol/squeue/scancel argv with text shaped like Slurm 24.05 prints it."""

    nodes: list[str]
    jobs: dict[str, tuple[str, int]] = field(default_factory=dict)  # id -> (node, polls left)
    drained: dict[str, str] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)
    calls: list[list[str]] = field(default_factory=list)
    reservations: dict[str, str] = field(default_factory=dict)

    def __call__(self, argv: Sequence[str]) -> str:
        argv = list(argv)
        self.calls.append(argv)
        if argv[:2] == ["scontrol", "update"]:
            fields = dict(a.split("=", 1) for a in argv[2:])
            for node in NodeSet(fields["nodename"]):
                if fields["state"] == "drain":
                    self.drained[node] = fields["reason"]
                    # A reason the tool writes is one it knows as its own (drains.is_ours),
                    # or no later run could lift it: every workflow and gate test checks so.
                    assert is_ours(fields["reason"]), fields["reason"]
                elif fields["state"] == "resume":
                    if node not in self.drained and node not in self.down:
                        # What Slurm 23-24 answers for a node already in service.
                        raise SlurmError(
                            "scontrol update: slurm_update error: Invalid node state specified"
                        )
                    self.drained.pop(node, None)
            return ""
        if argv[:3] == ["scontrol", "show", "node"]:
            wanted = list(NodeSet(argv[4])) if len(argv) > 4 else self.nodes
            return "".join(self._line(n) for n in wanted)
        if argv[0] == "squeue" and "-w" in argv:
            wanted = set(NodeSet(argv[argv.index("-w") + 1]))
            return "".join(f"{j}|{n}\n" for j, (n, _) in self.jobs.items() if n in wanted)
        if argv[0] == "scancel" and argv[1] == "-w":
            wanted = set(NodeSet(argv[2]))
            self.jobs = {j: v for j, v in self.jobs.items() if v[0] not in wanted}
            return ""
        if argv[:3] == ["scontrol", "create", "reservation"]:
            fields = dict(a.split("=", 1) for a in argv[3:])
            self.reservations[fields["ReservationName"]] = fields["Nodes"]
            return f"Reservation created: {fields['ReservationName']}\n"
        if argv[:2] == ["scontrol", "delete"]:
            self.reservations.pop(argv[2].split("=", 1)[1], None)
            return ""
        raise AssertionError(f"unexpected command {argv}")

    def _busy(self, node: str) -> bool:
        return any(n == node for n, _ in self.jobs.values())

    def _line(self, node: str) -> str:
        # A read is a poll: running jobs get one step closer to their end.
        for job_id, (n, left) in list(self.jobs.items()):
            if n == node:
                if left <= 1:
                    del self.jobs[job_id]
                else:
                    self.jobs[job_id] = (n, left - 1)
        if node in self.down:
            state = "DOWN*+NOT_RESPONDING"
        else:
            state = "MIXED" if self._busy(node) else "IDLE"
        reason = ""
        if node in self.drained:
            state += "+DRAIN"
            reason = f" Reason={self.drained[node]} [root@2026-11-29T12:00:00]"
        return (
            f"NodeName={node} Arch=x86_64 CPUAlloc=0 Gres=gpu:h100:8 NodeAddr=10.77.0.11 "
            f"State={state} Partitions=gpu{reason}\n"
        )


def admin_slurm(cluster: SlurmCluster) -> AdminSlurm:
    return AdminSlurm(run=cluster)


@dataclass
class EmulatedBmcs:
    """Per node: power state, boot override, and power actions applied `lag` reads later, as the
    emulator's fake driver applies them; a power-on with a one-time PXE override re-images."""

    nodes: list[str]
    lag: int = 2
    refuse_pxe: set[str] = field(default_factory=set)
    power: dict[str, str] = field(default_factory=dict)
    target: dict[str, str] = field(default_factory=dict)
    pending: dict[str, tuple[str, int]] = field(default_factory=dict)
    reimaged: list[str] = field(default_factory=list)
    booted: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for n in self.nodes:
            self.power.setdefault(n, "On")
            self.target.setdefault(n, "Hdd")

    def power_state(self, node: str) -> str:
        if node in self.pending:
            want, left = self.pending[node]
            if left <= 1:
                del self.pending[node]
                self._apply(node, want)
            else:
                self.pending[node] = (want, left - 1)
        return self.power[node]

    def _apply(self, node: str, want: str) -> None:
        if self.power[node] == want:
            return
        self.power[node] = want
        if want == "On":
            self.booted.append(node)
            if self.target[node] == "Pxe":
                self.reimaged.append(node)
                self.target[node] = "Hdd"  # one-time: the next boot is from disk again

    def set_pxe_once(self, node: str) -> None:
        if node in self.refuse_pxe:
            raise BmcError(f"{node}: the BMC refused a one-time PXE boot: HTTP 400 Bad Request")
        self.target[node] = "Pxe"

    def power_off(self, node: str) -> None:
        self.pending[node] = ("Off", self.lag)

    def power_on(self, node: str) -> None:
        self.pending[node] = ("On", self.lag)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def gate_proof(nodes: Sequence[str], findings: Sequence[Finding], pairs: bool = True) -> GateProof:
    """The `proof` a real gate run reports (cluster_tool.gate.ladder): the nodes whose single job
    passed (none that an error finding names) and, when the pairs rung runs, the passing pair
    jobs the localisation's first screen would run (neighbours in the list)."""
    bad = {f.node for f in findings if f.fails and f.node}
    held = any(f.fails and f.node is None for f in findings)
    good = [n for n in nodes if n not in bad]
    jobs = [] if held or not pairs else [(a, b) for a, b in pairwise(good)]
    return GateProof(good, jobs)


def complete_proof(node: str) -> NodeProof:
    """What a passing ladder proves of a node: every check the workflows plan ran and passed."""
    return prove(
        [node],
        {node: NodeVerdict("pass")},
        [],
        planned={node: (*NODE_CHECKS, *VERSION_CHECKS, *GATE_CHECKS), "fabric": FABRIC_CHECKS},
        skipped={},
        suites=WORKFLOW_SUITES,
    )[node]


def os_release(name: str) -> str:
    """A real /etc/os-release from tests/fixtures/os-release (its source line dropped)."""
    from tests.conftest import FIXTURES

    return (FIXTURES / "os-release" / name).read_text().split("\n", 1)[1]


class AnsweringTransport:
    """SSH to hosts that are up: every script exits 0, `cat /etc/os-release` answers the real
    file of Ubuntu 22.04 (or `runs[host]`'s, a file of tests/fixtures/os-release); `down` hosts
    fail as ssh does toward a host that is off (exit 255, its last line). A probe script (the
    fan-out's, remote/probes.py) gets each probe's answer from `shows[host][probe]` (an
    (rc, stdout) pair), else the os-release file for `os-release`, else exit 127 as from a
    tool that is not installed."""

    def __init__(
        self,
        down: set[str] | None = None,
        runs: dict[str, str] | None = None,
        shows: dict[str, dict[str, tuple[int, str]]] | None = None,
    ) -> None:
        self.down = down or set()
        self.runs = runs or {}
        self.shows = shows or {}
        self.asked: list[str] = []

    def run(self, target: Any, script: str, timeout: float) -> tuple[int, bytes, bytes]:
        from cluster_tool.remote.fanout import TransportError

        self.asked.append(target.name)
        if target.name in self.down:
            raise TransportError(f"ssh: connect to host {target.address} port 22: No route to host")
        release = os_release(self.runs.get(target.name, "ubuntu-22.04.2.txt"))
        if script.startswith("cat /etc/os-release"):
            return 0, release.encode(), b""
        token = re.search(r"@@cluster-tool (\w+) ", script)
        if token is None:
            return 0, b"", b""
        out = b""
        for name in re.findall(r"^run ([a-z0-9-]+) ", script, re.M):
            default = (0, release) if name == "os-release" else (127, "")
            rc, text = self.shows.get(target.name, {}).get(name, default)
            err = b"" if rc != 127 else f"sh: 1: {name}: not found\n".encode()
            data = text.encode()
            out += f"@@cluster-tool {token[1]} {name} {rc} {len(data)} {len(err)}@@\n".encode()
            out += data + err
        return 0, out, b""
