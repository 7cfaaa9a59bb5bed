"""Test doubles for the gate: nccl-tests outputs derived from the real captures, a Slurm that
replays captured command output and writes job outputs as a cluster would, and a clock."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cluster_tool.drains import is_ours
from cluster_tool.slurm import SlurmError
from tests.conftest import read_real_output

SINGLE = "all_reduce_perf_h100_single_node_8gpu_nvls_nvidia_dgxc.txt"
PAIR = "all_reduce_perf_h100_2node_16gpu_ib_ndr_xe9680.txt"

_ROW = re.compile(r"^(\s*\d+\s+\d+\s+\w+\s+\w+\s+-?\d+)(.*)$")


def scaled_output(name: str, factor: float, *, wrong: int = 0, cut_after: int | None = None) -> str:
    """A real capture with every time/algbw/busbw scaled to `factor` of its speed.

    `wrong` puts that many mismatches into the last row; `cut_after` ends the output after
    that many table rows (a run that died or hangs).
    """
    out: list[str] = []
    rows = 0
    for line in read_real_output(name).splitlines():
        m = _ROW.match(line)
        if not m:
            if cut_after is not None and rows >= cut_after:
                break
            out.append(line)
            continue
        rows += 1
        if cut_after is not None and rows > cut_after:
            break
        t1, a1, b1, w1, t2, a2, b2, w2 = m.group(2).split()
        fields = [
            f"{float(t1) / factor:.1f}",
            f"{float(a1) * factor:.2f}",
            f"{float(b1) * factor:.2f}",
            w1,
            f"{float(t2) / factor:.1f}",
            f"{float(a2) * factor:.2f}",
            f"{float(b2) * factor:.2f}",
            w2,
        ]
        out.append(m.group(1) + "".join(" " + v.rjust(8) for v in fields))
    if wrong:
        last = max(i for i, ln in enumerate(out) if _ROW.match(ln))
        parts = out[last].rsplit(None, 1)
        out[last] = f"{parts[0]} {wrong:>6}"
    return "\n".join(out) + "\n"


def pair_output(factor: float = 1.0, *, gdr: bool = True, hosts: Sequence[str] = ()) -> str:
    """A 2-node all_reduce with NCCL_DEBUG=INFO channel lines for each host."""
    text = scaled_output(PAIR, factor)
    info = []
    for i, host in enumerate(hosts):
        via = "NET/IB/0/GDRDMA" if gdr else "NET/IB/0"
        info.append(
            f"{host}:{4000 + i}:{4010 + i} [0] NCCL INFO Channel 00/0 : {8 * i}[0] -> "
            f"{8 * (1 - i)}[0] [send] via {via}"
        )
    return "\n".join(info) + "\n" + text if info else text


@dataclass
class FakeClock:
    """Monotonic time that only moves when the code under test sleeps."""

    now: float = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


# What a job's step prints: (job name, nodes, step label) -> text, or None to print nothing;
# HANG means the step prints its first rows and then nothing more, ever.
HANG = "__hang__"
Answer = Callable[[str, tuple[str, ...], str], str | None]


@dataclass
class _Job:
    job_id: str
    name: str
    nodes: tuple[str, ...]
    outputs: dict[str, Path]
    hang: bool = False
    polls: int = 0
    cancelled: bool = False


@dataclass
class ReplaySlurm:
    """Answers sbatch/squeue/sacct/scancel/scontrol/sinfo argv the way a cluster prints.

    Jobs run on the second poll; their outputs appear then; hung jobs stay RUNNING until
    scancel. Drains are kept and shown back through `scontrol show node -o`.
    """

    answer: Answer
    calls: list[list[str]] = field(default_factory=list)
    jobs: dict[str, _Job] = field(default_factory=dict)
    drained: dict[str, str] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)
    # node -> reads of `scontrol show node` before its slurmd registers (IDLE* until then)
    registering: dict[str, int] = field(default_factory=dict)
    never_start: set[str] = field(default_factory=set)  # jobs with these nodes stay queued
    refuse_after: int | None = None  # sbatch fails once this many jobs were accepted
    next_id: int = 5000

    def __call__(self, argv: Sequence[str]) -> str:
        argv = list(argv)
        self.calls.append(argv)
        cmd = argv[0]
        if cmd == "sbatch":
            return self._sbatch(Path(argv[-1]))
        if cmd == "squeue":
            return self._squeue(argv[argv.index("-j") + 1].split(","))
        if cmd == "sacct":
            return self._sacct(argv[argv.index("-j") + 1].split(","))
        if cmd == "scancel":
            self.jobs[argv[1]].cancelled = True
            return ""
        if argv[:2] == ["scontrol", "update"]:
            return self._update(argv[2:])
        if argv[:3] == ["scontrol", "show", "node"]:
            return self._show_nodes(argv[4] if len(argv) > 4 else None)
        raise AssertionError(f"unexpected command {argv}")

    def _sbatch(self, script: Path) -> str:
        if self.refuse_after is not None and len(self.jobs) >= self.refuse_after:
            raise SlurmError("sbatch --parsable: Batch job submission failed: Socket timed out")
        text = script.read_text()
        name = re.search(r"--job-name=ct-gate-(\S+)", text).group(1)  # type: ignore[union-attr]
        nodes = tuple(re.search(r"--nodelist=(\S+)", text).group(1).split(","))  # type: ignore[union-attr]
        outputs = {
            m.group(1): Path(m.group(2))
            for m in re.finditer(r"step (\S+)'\nsrun .*? > (\S+) 2>&1", text)
        }
        self.next_id += 1
        job_id = str(self.next_id)
        self.jobs[job_id] = _Job(job_id, name, nodes, outputs)
        return f"{job_id}\n"

    def _start(self, job: _Job) -> None:
        for label, path in job.outputs.items():
            text = self.answer(job.name, job.nodes, label)
            if text is None:
                continue
            if text.startswith(HANG):
                job.hang = True
                text = text[len(HANG) :]
            path.write_text(text)

    def _squeue(self, ids: list[str]) -> str:
        lines = []
        for job_id in ids:
            job = self.jobs[job_id]
            if job.cancelled:
                continue  # gone from the queue; sacct knows it
            job.polls += 1
            if set(job.nodes) & self.never_start:
                lines.append(f"{job_id}|PENDING|ReqNodeNotAvail, Reserved for maintenance")
            elif job.polls == 1:
                lines.append(f"{job_id}|PENDING|Resources")
            elif job.polls == 2:
                self._start(job)
                lines.append(f"{job_id}|RUNNING|None")
            elif job.hang:
                lines.append(f"{job_id}|RUNNING|None")
        return "\n".join(lines) + ("\n" if lines else "")

    def _sacct(self, ids: list[str]) -> str:
        return "".join(
            f"{j}|{'CANCELLED by 0' if self.jobs[j].cancelled else 'COMPLETED'}|0:0\n" for j in ids
        )

    def _update(self, args: list[str]) -> str:
        fields = dict(a.split("=", 1) for a in args)
        from ClusterShell.NodeSet import NodeSet

        for node in NodeSet(fields["nodename"]):
            if fields["state"] == "drain":
                self.drained[node] = fields["reason"]
                # A reason the tool writes is one it knows as its own (drains.is_ours),
                # or no later run could lift it: every workflow and gate test checks so.
                assert is_ours(fields["reason"]), fields["reason"]
            elif fields["state"] == "resume":
                self.drained.pop(node, None)
        return ""

    def _show_nodes(self, hostlist: str | None) -> str:
        from ClusterShell.NodeSet import NodeSet

        known = {n for j in self.jobs.values() for n in j.nodes} | set(self.drained)
        lines = []
        for node in sorted(NodeSet(hostlist) if hostlist else known):
            if node in self.down:
                lines.append(f"NodeName={node} State=DOWN*+NOT_RESPONDING Reason=Not responding")
                continue
            if self.registering.get(node, 0) > 0:
                self.registering[node] -= 1
                lines.append(f"NodeName={node} State=IDLE*+NOT_RESPONDING Partitions=gpu")
                continue
            state = "IDLE+DRAIN" if node in self.drained else "IDLE"
            reason = (
                f" Reason={self.drained[node]} [root@2024-11-29T12:32:05]"
                if node in self.drained
                else ""
            )
            lines.append(f"NodeName={node} Arch=x86_64 State={state} Partitions=gpu{reason}")
        return "\n".join(lines) + "\n"
