"""A Slurm with running jobs (squeue -t RUNNING, scontrol requeue) over the workflows' fake, and
signal sources that answer each cycle with captured output: the nvidia-smi -q of a real 8x H100
node, a kernel log (the lab's HCAs, in the real line format) and HCA port counters per node."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tool.probes import ProbeOutput
from cluster_tool.remote.fanout import HostResult
from cluster_tool.slurm import AdminSlurm
from tests.conftest import read_real_output
from tests.unit.workflows.fakes import SlurmCluster

# A real 8x H100 nvidia-smi -q (driver 535.161.08, from gpud's test data): every GPU reads
# throttled by a software reason (gpu.throttle warnings), nothing that fails a node.
NVIDIA_SMI_Q = read_real_output("nvidia-smi-q_h100x8_driver535.161.08_full.txt")
# The lab profile's compute HCAs: device, PCI address, netdev, rail (examples/lab.yml).
HCAS = [
    ("mlx5_0", "0000:18:00.0", "ibp24s0"),
    ("mlx5_3", "0000:40:00.0", "ibp64s0"),
    ("mlx5_4", "0000:4f:00.0", "ibp79s0"),
    ("mlx5_5", "0000:5e:00.0", "ibp94s0"),
    ("mlx5_6", "0000:9a:00.0", "ibp154s0"),
    ("mlx5_9", "0000:c0:00.0", "ibp192s0"),
    ("mlx5_10", "0000:ce:00.0", "ibp206s0"),
    ("mlx5_11", "0000:dc:00.0", "ibp220s0"),
]
BOOT_LOG = (
    "[    2.104321] mlx5_core 0000:18:00.0: firmware version: 20.39.1002\n"
    "[   14.201000] mlx5_core 0000:18:00.0 ibp24s0: Link up\n"
)


def flapping(times: int, hca: int = 0, start: float = 900.0) -> str:
    """`times` downs and ups of one HCA's link, as mlx5_core prints them (dmesg)."""
    _, pci, netdev = HCAS[hca]
    out = []
    for i in range(times):
        out.append(f"[{start + 10 * i:12.6f}] mlx5_core {pci} {netdev}: Link down\n")
        out.append(f"[{start + 10 * i + 2:12.6f}] mlx5_core {pci} {netdev}: Link up\n")
    return "".join(out)


def port_counters(xmit_words: Mapping[str, int], wait: int = 0) -> str:
    """The port-counters probe's output: PortXmitData (4-octet words) per HCA."""
    lines = []
    for device, _, _ in HCAS:
        base = f"/sys/class/infiniband/{device}/ports/1/counters"
        lines.append(f"{base}/port_xmit_data {xmit_words.get(device, 0)}")
        lines.append(f"{base}/port_rcv_data {xmit_words.get(device, 0)}")
        lines.append(f"{base}/port_xmit_wait {wait}")
        lines.append(f"{base}/link_downed 0")
    return "\n".join(lines) + "\n"


def gpu_clocks(sm_mhz: int = 1980, slow_gpu: int | None = None, slow_mhz: int = 1980) -> str:
    """`nvidia-smi --query-gpu=index,clocks.sm,utilization.gpu --format=csv,noheader,nounits`:
    eight GPUs at `sm_mhz` (H100 SXM's maximum SM clock, 1980 MHz), one at `slow_mhz`."""
    return "".join(f"{i}, {slow_mhz if i == slow_gpu else sm_mhz}, 100\n" for i in range(8))


@dataclass
class NodeReading:
    kernel_log: str = BOOT_LOG
    counters: str = ""
    smi: str = NVIDIA_SMI_Q
    clocks: str = field(default_factory=gpu_clocks)
    reachable: bool = True
    # How nvidia-smi ended (both of its probes, `-q` and `--query-gpu`, run the same tool).
    smi_rc: int = 0
    smi_stderr: str = ""


@dataclass
class CapturedSources:
    """Per node, what its probes print this cycle; a test changes `readings` between cycles."""

    readings: dict[str, NodeReading]
    fabric: HostResult | None = None
    asked: list[list[str]] = field(default_factory=list)

    def node_outputs(self, nodes: Sequence[str]) -> Mapping[str, HostResult]:
        self.asked.append(list(nodes))
        out: dict[str, HostResult] = {}
        for node in nodes:
            r = self.readings.get(node, NodeReading())
            if not r.reachable:
                out[node] = HostResult(node, error="ssh: connect timed out")
                continue
            out[node] = HostResult(
                node,
                outputs={
                    "nvidia-smi-q": ProbeOutput(r.smi_rc, r.smi, r.smi_stderr),
                    "kernel-log": ProbeOutput(0, r.kernel_log),
                    "port-counters": ProbeOutput(0, r.counters),
                    "gpu-clocks": ProbeOutput(
                        r.smi_rc, r.clocks if r.smi_rc == 0 else r.smi, r.smi_stderr
                    ),
                },
            )
        return out

    def fabric_outputs(self) -> HostResult | None:
        return self.fabric


@dataclass
class WatchSlurm(SlurmCluster):
    """The workflows' fake Slurm plus running jobs with features and comments, and requeue."""

    running: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # id -> nodes, f, c
    requeued: list[str] = field(default_factory=list)
    # Jobs back in the queue: id -> (squeue %T, %r). A requeued job shows COMPLETING while its
    # previous run's epilog runs, then PENDING for BeginTime (a test moves it on).
    queued: dict[str, tuple[str, str]] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)
    signalled: list[tuple[str, str]] = field(default_factory=list)  # (job id, signal)
    # What `scontrol show node` adds for a node: its State= as Slurm would print it (a reboot:
    # `DOWN+REBOOT_ISSUED Reason=Reboot ASAP : reboot issued`) and its BootTime.
    shown: dict[str, str] = field(default_factory=dict)
    boot: dict[str, str] = field(default_factory=dict)

    def __call__(self, argv: Sequence[str]) -> str:
        argv = list(argv)
        if argv[:4] == ["squeue", "-h", "-t", "RUNNING"]:
            self.calls.append(argv)
            assert argv[4] == "-o" and argv[5].endswith("|%i|%N|%f|%k"), argv
            token = argv[5].split("|", 1)[0]
            return "".join(
                f"{token}|{job}|{nodes}|{features or '(null)'}|{comment or '(null)'}\n"
                for job, (nodes, features, comment) in self.running.items()
            )
        if argv[:2] == ["scancel", "--batch"]:
            self.calls.append(argv)
            assert argv[2].startswith("--signal=") and len(argv) == 4, argv
            self.signalled.append((argv[3], argv[2].split("=", 1)[1]))
            return ""
        if argv[:2] == ["scontrol", "requeue"]:
            self.calls.append(argv)
            self.requeued.append(argv[2])
            self.running.pop(argv[2], None)
            self.queued[argv[2]] = ("COMPLETING", "None")
            return ""
        if argv[:3] == ["squeue", "-h", "-j"]:
            self.calls.append(argv)
            assert argv[4:] == ["-o", "%i|%T|%r"], argv
            wanted = argv[3].split(",")
            return "".join(f"{j}|{t}|{r}\n" for j, (t, r) in self.queued.items() if j in wanted)
        if argv[:2] == ["scontrol", "update"] and argv[2].startswith("JobId="):
            self.calls.append(argv)
            assert argv[3:] == ["StartTime=now"], argv
            self.started.append(argv[2].split("=", 1)[1])
            return ""
        return super().__call__(argv)

    def _line(self, node: str) -> str:
        line = super()._line(node).rstrip("\n")
        if node in self.shown:
            line = re.sub(r"State=\S+", lambda _: f"State={self.shown[node]}", line)
        if node in self.boot:
            # Where Slurm prints it: after State and Partitions, before Reason.
            boot = f" BootTime={self.boot[node]}"
            cut = line.find(" Reason=")
            line = line + boot if cut < 0 else line[:cut] + boot + line[cut:]
        return line + "\n"

    def drains(self) -> list[list[str]]:
        return [c for c in self.calls if c[:2] == ["scontrol", "update"] and "state=drain" in c]


def admin(fake: WatchSlurm) -> AdminSlurm:
    return AdminSlurm(run=fake)
