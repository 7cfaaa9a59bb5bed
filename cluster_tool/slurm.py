"""The one door to Slurm: submit, poll, cancel, drain/resume, node states, maintenance
reservations; parsers of their output; `connect()`, the one factory every command uses.

`SlurmCLI` runs the real commands through a `CommandRunner`; tests hand it one that
replays captured text, so everything above it runs unchanged against a fake cluster.
"""

from __future__ import annotations

import getpass
import os
import re
import secrets
import shlex
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ClusterShell.NodeSet import NodeSet

from cluster_tool.bounds import HostlistError, HostlistTooLarge, expand_hostlist
from cluster_tool.errors import ClusterToolError, ParseError

# States after which a job will never run again (sacct/squeue long names).
TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
    }
)


_USABLE_STATES = frozenset({"IDLE", "MIXED", "ALLOCATED", "COMPLETING", "PLANNED"})
_UNUSABLE_FLAGS = frozenset(
    {"NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "REBOOT_ISSUED", "FAIL"}
)


class SlurmError(ClusterToolError):
    """A Slurm command failed; carries the command and what it said on stderr."""


class CommandRunner(Protocol):
    def __call__(self, argv: Sequence[str]) -> str: ...


def _run(argv: Sequence[str], timeout: float, late: str) -> subprocess.CompletedProcess[str]:
    """Run a Slurm client command whatever its exit; SlurmError when it is missing or exceeds
    `timeout` (`late` says what did not end)."""
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError as exc:
        raise SlurmError(f"{argv[0]}: not found (is this a Slurm login node?)") from exc
    except subprocess.TimeoutExpired as exc:
        raise SlurmError(f"{late} in {timeout:g} s") from exc


def run_command(argv: Sequence[str], timeout: float = 60.0) -> str:
    """Run a Slurm client command, return stdout; a non-zero exit is a SlurmError with stderr."""
    proc = _run(argv, timeout, f"{' '.join(argv)}: no answer")
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise SlurmError(f"{' '.join(argv[:2])}: {err[-1] if err else f'exit {proc.returncode}'}")
    return proc.stdout


@dataclass(frozen=True)
class JobState:
    """A job's state as Slurm reports it (long name, `CANCELLED by 0` reduced to `CANCELLED`)."""

    job_id: str
    state: str
    exit_code: str = ""
    reason: str = ""

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES


@dataclass(frozen=True)
class NodeState:
    """A node as `scontrol show node -o` or `sinfo` shows it: state flags and drain reason."""

    name: str
    state: str
    reason: str = ""
    flags: frozenset[str] = field(default_factory=frozenset)
    boot_time: str = ""  # scontrol's BootTime (`2023-01-26T09:56:30`); "" where not shown

    @property
    def drained(self) -> bool:
        """Drained or draining: Slurm will not start new jobs there."""
        return "DRAIN" in self.flags or self.state in {"DRAINED", "DRAINING"}

    @property
    def usable(self) -> bool:
        """Slurm would start a job here (now, or once the running ones end)."""
        return (
            self.state in _USABLE_STATES and not self.drained and not (self.flags & _UNUSABLE_FLAGS)
        )


def parse_sbatch_parsable(text: str) -> str:
    """`sbatch --parsable` prints `JOBID` or `JOBID;CLUSTER`."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ParseError("sbatch printed no job id")
    last = lines[-1]
    job_id = last.split(";", 1)[0]
    if not job_id.isdigit():
        raise ParseError("expected a job id", line_no=len(text.splitlines()), line=last)
    return job_id


def _state_word(raw: str) -> str:
    # sacct: "CANCELLED by 0"; squeue may add flags after a space or a '+'.
    return raw.strip().split(" ", 1)[0].split("+", 1)[0].upper()


def parse_sacct(text: str) -> dict[str, JobState]:
    """`sacct -n -P -X -o JobID,State,ExitCode` lines: `123|COMPLETED|0:0`."""
    states: dict[str, JobState] = {}
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < 2 or not parts[0].strip():
            raise ParseError("expected JobID|State|ExitCode", line_no=no, line=line)
        job_id = parts[0].strip()
        if "." in job_id:  # a step (123.batch); -X should have left them out
            continue
        states[job_id] = JobState(
            job_id, _state_word(parts[1]), parts[2].strip() if len(parts) > 2 else ""
        )
    return states


def parse_squeue(text: str) -> dict[str, JobState]:
    """`squeue -h -o %i|%T|%r` lines: `123|RUNNING|None`."""
    states: dict[str, JobState] = {}
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < 2 or not parts[0].strip():
            raise ParseError("expected JobID|State|Reason", line_no=no, line=line)
        reason = parts[2].strip() if len(parts) > 2 else ""
        states[parts[0].strip()] = JobState(parts[0].strip(), _state_word(parts[1]), "", reason)
    return states


# The keys of `scontrol show node -o`, in the order Slurm prints them (slurm_sprint_node_table
# in src/api/node_info.c, https://github.com/SchedMD/slurm; the keys of older releases at their
# places). A value runs to the next of these keys that Slurm prints after it: text inside a value
# that looks like an earlier key (`NodeName=`, `State=` in a drain reason) stays in the value.
_NODE_KEYS = (
    "NodeName", "Arch", "CpuBind", "CoresPerSocket", "CPUAlloc", "CPUEfctv", "CPUErr", "CPUTot",
    "CPULoad", "AvailableFeatures", "ActiveFeatures", "Features", "Gres", "GresDrain",
    "GresUsed", "NodeAddr", "NodeHostName", "BcastAddr", "Port", "Version", "OS", "RealMemory",
    "AllocMem", "FreeMem", "Sockets", "Boards", "CoreSpecCount", "CPUSpecList", "MemSpecLimit",
    "RestrictedCoresPerGPU", "State", "ThreadsPerCore", "TmpDisk", "Weight", "Owner",
    "MCS_label", "NextState", "Partitions", "BootTime", "SlurmdStartTime", "LastBusyTime",
    "ResumeAfterTime", "CfgTRES", "AllocTRES", "CapWatts", "CurrentWatts", "AveWatts",
    "LowestJoules", "ConsumedJoules", "ExtSensorsJoules", "ExtSensorsWatts", "ExtSensorsTemp",
    "Reason", "Comment", "Extra", "InstanceId", "InstanceType", "ReservationName",
)  # fmt: skip
_NODE_ORDER = {key: at for at, key in enumerate(_NODE_KEYS)}
_NODE_KEY = re.compile(r"(?:^|(?<=\s))(" + "|".join(_NODE_KEYS) + r")=")
# Free text: the OS string is the node's own (slurmd reports uname), a reason, comment or extra
# whatever an operator or a tool wrote. Such a value ends only at a key that can follow it.
_FREE_TEXT_END = {
    "OS": re.compile(r"\sRealMemory=\d{1,20} AllocMem=\d{1,20} FreeMem="),
    "Reason": re.compile(r"\s(?:Comment|Extra|InstanceId|InstanceType|ReservationName)="),
    "Comment": re.compile(r"\s(?:Extra|InstanceId|InstanceType|ReservationName)="),
    "Extra": re.compile(r"\s(?:InstanceId|InstanceType|ReservationName)="),
}


def _nodes_of(hostlist: str, line_no: int, line: str) -> list[str]:
    """A node list Slurm printed, through the one bounded expansion; ParseError naming the line
    when it is not a hostlist or names more hosts than any cluster has."""
    try:
        return expand_hostlist(hostlist, "node list")
    except (HostlistError, HostlistTooLarge) as exc:
        raise ParseError(str(exc), line_no=line_no, line=line) from None


def parse_squeue_nodes(text: str) -> dict[str, list[str]]:
    """`squeue -h -o %i|%N` lines (`123|gpu[001-002]`): the job ids running on each node."""
    found: dict[str, list[str]] = {}
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != 2:
            raise ParseError("expected JOBID|NODELIST", line_no=no, line=line)
        for node in _nodes_of(parts[1].strip(), no, line):
            found.setdefault(node, []).append(parts[0].strip())
    return found


@dataclass(frozen=True)
class RunningJob:
    """A running job as `squeue -h -t RUNNING -o %i|%N|%f|%k` shows it: its nodes, the features
    it asked for and its comment (how a job opts in to being requeued by `cluster-tool watch`)."""

    job_id: str
    nodes: tuple[str, ...]
    features: str = ""
    comment: str = ""


def parse_squeue_running(text: str, token: str | None = None) -> list[RunningJob]:
    """`squeue -h -t RUNNING -o %i|%N|%f|%k` lines (`123|gpu[001-004]|(null)|ckpt requeue`);
    the comment comes last, so a `|` inside it stays in it. With `token` (the format was
    `TOKEN|%i|%N|%f|%k`), only a line starting with it starts a job: a comment is any user's
    text, and a newline in it must not read as another job's line (one the watcher would
    requeue); such a line belongs to the comment before it."""
    jobs: list[RunningJob] = []
    for no, line in enumerate(text.splitlines(), 1):
        if token is not None:
            if not line.startswith(f"{token}|"):
                if not jobs:
                    raise ParseError("expected a job line first", line_no=no, line=line)
                last = jobs[-1]
                jobs[-1] = RunningJob(
                    last.job_id, last.nodes, last.features, f"{last.comment}\n{line}"
                )
                continue
            line = line[len(token) + 1 :]
        if not line.strip():
            continue
        parts = line.split("|", 3)
        if len(parts) != 4 or not parts[0].strip():
            raise ParseError("expected JOBID|NODELIST|FEATURES|COMMENT", line_no=no, line=line)
        features, comment = (p.strip() for p in parts[2:])
        jobs.append(
            RunningJob(
                parts[0].strip(),
                tuple(_nodes_of(parts[1].strip(), no, line)),
                "" if features == "(null)" else features,
                "" if comment == "(null)" else comment,
            )
        )
    return jobs


def parse_scontrol_fields(line: str) -> dict[str, str]:
    """Split one `scontrol show node -o` line into its fields, keeping spaces inside values. A
    field starts only at a known key printed after the one before it; a free-text value (OS,
    Reason, Comment, Extra) ends only at a key that can follow it, so a reason reading
    `NodeName=gpu009 State=IDLE` neither renames nor "undrains" the node."""
    fields: dict[str, str] = {}
    key: str | None = None
    start = 0
    at = 0
    while True:
        found = _FREE_TEXT_END[key].search(line, at) if key in _FREE_TEXT_END else None
        if found is not None or key in ("Reason", "Comment", "Extra"):
            match = _NODE_KEY.match(line, found.start() + 1) if found else None
        else:  # a structured value, or an OS string no later field follows as Slurm prints it
            match = _NODE_KEY.search(line, at)
            while match and key is not None and _NODE_ORDER[match[1]] <= _NODE_ORDER[key]:
                match = _NODE_KEY.search(line, match.end())
        end = match.start() if match else len(line)
        if key is not None:
            fields[key] = line[start:end].strip()
        if match is None:
            return fields
        key, start, at = match[1], match.end(), match.end()


def _node_flags(state: str) -> tuple[str, frozenset[str]]:
    # "IDLE+DRAIN", "MIXED+DRAIN", "DOWN*+DRAIN": base state then flags.
    parts = [p.rstrip("*~#!%$@^-") for p in state.upper().split("+")]
    return parts[0], frozenset(parts[1:])


def _without_stamp(reason: str) -> str:
    """The reason without the `[user@time]` Slurm appends (cut in code: the pattern
    `\\s*\\[...\\]$` backtracks quadratically over a long blank run in a reason)."""
    body = reason.rstrip()
    if body.endswith("]"):
        at = body.rfind("[")
        if at >= 0 and "@" in body[at:] and "]" not in body[at:-1]:
            return body[:at].rstrip()
    return reason


def parse_scontrol_nodes(text: str) -> list[NodeState]:
    """`scontrol show node -o`: one line per node (NodeName=… State=IDLE+DRAIN … Reason=…)."""
    nodes: list[NodeState] = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = parse_scontrol_fields(line)
        if "NodeName" not in fields or "State" not in fields:
            raise ParseError("expected NodeName=… State=…", line_no=no, line=line)
        base, flags = _node_flags(fields["State"])
        reason = _without_stamp(fields.get("Reason", ""))
        boot = fields.get("BootTime", "").split(" ", 1)[0]
        boot = "" if boot in ("None", "Unknown", "n/a") else boot
        nodes.append(NodeState(fields["NodeName"].split()[0], base, reason, flags, boot))
    return nodes


_SINFO_LONG = {"DRAINED": ("IDLE", "DRAIN"), "DRAINING": ("ALLOCATED", "DRAIN")}


def parse_sinfo_nodes(text: str) -> list[NodeState]:
    """`sinfo -h -N -o %N|%T|%E` lines: `gpu001|drained|cluster-tool gate: …`."""
    nodes: dict[str, NodeState] = {}
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|", 2)
        if len(parts) < 2 or not parts[0].strip():
            raise ParseError("expected NODE|STATE|REASON", line_no=no, line=line)
        raw = parts[1].strip().upper().rstrip("*~#!%$@^-")
        base, flags = _SINFO_LONG.get(raw, (raw, None))
        reason = parts[2].strip() if len(parts) > 2 else ""
        if reason == "none":
            reason = ""
        name = parts[0].strip()
        # sinfo -N repeats a node once per partition; the first line is enough.
        nodes.setdefault(
            name, NodeState(name, base, reason, frozenset({flags}) if flags else frozenset())
        )
    return list(nodes.values())


class Slurm(Protocol):
    """What the gate and the workflows need from Slurm."""

    def submit(self, script: Path) -> str: ...
    def job_states(self, job_ids: Sequence[str]) -> dict[str, JobState]: ...
    def cancel(self, job_id: str) -> None: ...
    def drain(self, nodes: Iterable[str], reason: str) -> None: ...
    def resume(self, nodes: Iterable[str]) -> None: ...
    def node_states(self, nodes: Iterable[str] | None = None) -> list[NodeState]: ...


class SlurmSteps(Protocol):
    """What `validate --via slurm` needs: node states, and one job step across the nodes."""

    def node_states(self, nodes: Iterable[str] | None = None) -> list[NodeState]: ...
    def srun_step(self, argv: Sequence[str], timeout: float) -> StepRun: ...


class SlurmAdmin(Slurm, Protocol):
    """What the workflows need beyond the gate: the jobs on a node, cancelling them (only under
    --force), and the maintenance reservation the gate's jobs are submitted into."""

    def jobs_on(self, nodes: Iterable[str]) -> dict[str, list[str]]: ...
    def cancel_jobs_on(self, nodes: Iterable[str]) -> None: ...
    def reserve(self, name: str, nodes: Iterable[str]) -> None: ...
    def release(self, name: str) -> None: ...
    def running_jobs(self) -> list[RunningJob]: ...
    def requeue(self, job_id: str) -> None: ...
    def signal_batch(self, job_id: str, signal: str) -> None: ...
    def start_now(self, job_id: str) -> None: ...


@dataclass
class SlurmCLI:
    """Slurm through its client commands (sbatch, squeue, sacct, scancel, scontrol)."""

    run: Callable[[Sequence[str]], str] = run_command

    def submit(self, script: Path) -> str:
        return parse_sbatch_parsable(self.run(["sbatch", "--parsable", str(script)]))

    def job_states(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        """squeue for jobs still known to the controller, sacct for those that left it."""
        if not job_ids:
            return {}
        ids = ",".join(job_ids)
        states = parse_squeue(self.run(["squeue", "-h", "-j", ids, "-o", "%i|%T|%r"]))
        missing = [j for j in job_ids if j not in states]
        if missing:
            acct = parse_sacct(
                self.run(
                    [
                        "sacct",
                        "-n",
                        "-P",
                        "-X",
                        "-j",
                        ",".join(missing),
                        "-o",
                        "JobID,State,ExitCode",
                    ]
                )
            )
            states.update(acct)
        return states

    def cancel(self, job_id: str) -> None:
        self.run(["scancel", job_id])

    def drain(self, nodes: Iterable[str], reason: str) -> None:
        names = str(NodeSet.fromlist(list(nodes)))
        self.run(["scontrol", "update", f"nodename={names}", "state=drain", f"reason={reason}"])

    def resume(self, nodes: Iterable[str]) -> None:
        names = str(NodeSet.fromlist(list(nodes)))
        self.run(["scontrol", "update", f"nodename={names}", "state=resume"])

    def sinfo_nodes(self, partition: str | None = None) -> list[NodeState]:
        """The whole fleet in one cheap call: state and drain reason per node (`sinfo -N`)."""
        argv = ["sinfo", "-h", "-N", "-o", "%N|%T|%E"]
        if partition:
            argv += ["-p", partition]
        return parse_sinfo_nodes(self.run(argv))

    def node_states(self, nodes: Iterable[str] | None = None) -> list[NodeState]:
        """Per-node detail (`scontrol show node -o`), flags and reason included."""
        argv = ["scontrol", "show", "node", "-o"]
        if nodes is not None:
            argv.append(str(NodeSet.fromlist(list(nodes))))
        return parse_scontrol_nodes(self.run(argv))


def run_step_command(argv: Sequence[str], timeout: float) -> tuple[int, str]:
    """Run a job step's `srun` here: its exit status and what srun itself said on stderr. A
    non-zero status is not an error here: srun exits non-zero as soon as one task did."""
    proc = _run(argv, timeout, f"{argv[0]}: the step did not end")
    return proc.returncode, proc.stderr


def ssh_step_runner(
    host: str, ssh_config: Path | None = None
) -> Callable[[Sequence[str], float], tuple[int, str]]:
    """Run a job step's `srun` over SSH on `host`; ssh's own failure (exit 255) is a
    SlurmError, the step's status is returned as `run_step_command` returns it."""

    def run(argv: Sequence[str], timeout: float) -> tuple[int, str]:
        ssh = ["ssh", "-o", "BatchMode=yes"]
        if ssh_config is not None:
            ssh += ["-F", str(ssh_config)]
        rc, err = run_step_command([*ssh, host, shlex.join(argv)], timeout)
        if rc == 255:
            last = err.strip().splitlines()
            raise SlurmError(f"srun (on {host}): {last[-1] if last else 'ssh failed (exit 255)'}")
        return rc, err

    return run


@dataclass(frozen=True)
class StepRun:
    """How one job step ended: srun's exit status and the last thing srun itself said (why it
    could not allocate, which task failed). The tasks' own output is in their files."""

    rc: int
    said: str = ""


def srun_argv(
    nodes: Sequence[str],
    command: Sequence[str],
    *,
    output: str,
    error: str,
    time_limit_s: int,
    gpus_per_node: int | None = None,
    job_name: str = "cluster-tool",
) -> list[str]:
    """One task on each of `nodes`, at once or not at all, each task's stdout and stderr in a
    file of its own that Slurm names (`%N`: the node's name, expanded by Slurm on the node).
    A task that fails does not end the others (`--kill-on-bad-exit=0`), a node that never
    answers does not hold the step past its time limit, nor past `--wait` once the first task
    ended."""
    names = str(NodeSet.fromlist(list(nodes)))
    minutes = max(1, -(-time_limit_s // 60))
    argv = [
        "srun", f"--job-name={job_name}", f"--nodes={len(nodes)}", "--ntasks-per-node=1",
        f"--nodelist={names}", "--exclusive", f"--time={minutes}", "--immediate=30",
        "--kill-on-bad-exit=0", "--no-kill", f"--wait={time_limit_s}",
        f"--output={output}", f"--error={error}",
    ]  # fmt: skip
    if gpus_per_node:
        # Under ConstrainDevices a task sees only the GPUs it asked for.
        argv.append(f"--gpus-per-node={gpus_per_node}")
    return [*argv, *command]


def ssh_command_runner(
    host: str, ssh_config: Path | None = None, timeout: float = 120.0
) -> Callable[[Sequence[str]], str]:
    """Run Slurm client commands on `host` over SSH (the controller, when this machine is not a
    Slurm client); same contract as `run_command`."""

    def run(argv: Sequence[str]) -> str:
        ssh = ["ssh", "-o", "BatchMode=yes"]
        if ssh_config is not None:
            ssh += ["-F", str(ssh_config)]
        try:
            return run_command([*ssh, host, shlex.join(argv)], timeout=timeout)
        except SlurmError as exc:
            # run_command names its first words ("ssh -o"); name the Slurm command instead.
            why = str(exc).split(": ", 1)[-1]
            raise SlurmError(f"{' '.join(argv[:2])} (on {host}): {why}") from None

    return run


@dataclass
class AdminSlurm(SlurmCLI):
    """The shared Slurm client plus what workflows need beyond the gate: the jobs on a node,
    cancelling them (only under --force), and maintenance reservations the gate submits into."""

    reservation: str | None = None
    # How a job step's srun runs (here, or over SSH on the controller): it may run for minutes,
    # and its non-zero exit is an answer, not an error.
    step: Callable[[Sequence[str], float], tuple[int, str]] = run_step_command

    def __post_init__(self) -> None:
        inner = self.run

        def run(argv: Sequence[str]) -> str:
            # Gate jobs go into the maintenance reservation, so they may use nodes that no
            # user job can reach while they are being validated.
            if argv and argv[0] == "sbatch" and self.reservation:
                argv = ["sbatch", f"--reservation={self.reservation}", *argv[1:]]
            return inner(argv)

        self.run = run

    def jobs_on(self, nodes: Iterable[str]) -> dict[str, list[str]]:
        """Running (or completing) job ids per node, from `squeue -w`."""
        names = str(NodeSet.fromlist(list(nodes)))
        text = self.run(["squeue", "-h", "-w", names, "-t", "RUNNING,COMPLETING", "-o", "%i|%N"])
        return parse_squeue_nodes(text)

    def cancel_jobs_on(self, nodes: Iterable[str]) -> None:
        self.run(["scancel", "-w", str(NodeSet.fromlist(list(nodes)))])

    def reserve(self, name: str, nodes: Iterable[str]) -> None:
        """A maintenance reservation on `nodes` for this user; existing jobs are not touched."""
        names = str(NodeSet.fromlist(list(nodes)))
        self.run(
            [
                "scontrol", "create", "reservation", f"ReservationName={name}",
                f"Nodes={names}", "StartTime=now", "Duration=infinite",
                f"Users={getpass.getuser()}", "Flags=maint,ignore_jobs",
            ]
        )  # fmt: skip
        self.reservation = name

    def running_jobs(self) -> list[RunningJob]:
        """Every running job: its nodes, features and comment (`squeue -t RUNNING`)."""
        token = secrets.token_hex(8)
        return parse_squeue_running(
            self.run(["squeue", "-h", "-t", "RUNNING", "-o", f"{token}|%i|%N|%f|%k"]), token
        )

    def requeue(self, job_id: str) -> None:
        """Put a running batch job back in the queue (`scontrol requeue`): it restarts, from its
        own checkpoint, on nodes Slurm picks; a drained node is not among them."""
        self.run(["scontrol", "requeue", job_id])

    def signal_batch(self, job_id: str, signal: str) -> None:
        """Send `signal` to a job's batch step only (`scancel --batch --signal=SIG`): the batch
        script's trap, not every task, as `sbatch --signal=B:` does before the time limit."""
        self.run(["scancel", "--batch", f"--signal={signal}", job_id])

    def start_now(self, job_id: str) -> None:
        """End a pending job's begin-time hold (`scontrol update JobId=ID StartTime=now`), such
        as the one Slurm puts on a requeued batch job: it starts when the scheduler finds it
        room."""
        self.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"])

    def srun_step(self, argv: Sequence[str], timeout: float) -> StepRun:
        """Run one job step (`srun_argv`) and wait for it, at most `timeout` seconds."""
        rc, err = self.step(argv, timeout)
        lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
        return StepRun(rc, lines[-1] if lines else "")

    def release(self, name: str) -> None:
        try:
            self.run(["scontrol", "delete", f"ReservationName={name}"])
        finally:
            if self.reservation == name:
                self.reservation = None


def connect(via: str | None = None, ssh_config: Path | None = None) -> AdminSlurm:
    """The Slurm every command talks to: the client commands here, or over SSH on `via` (the
    controller; default $CLUSTER_TOOL_SLURM_VIA) when this machine is not a Slurm client."""
    host = via or os.environ.get("CLUSTER_TOOL_SLURM_VIA")
    if host:
        return AdminSlurm(
            run=ssh_command_runner(host, ssh_config), step=ssh_step_runner(host, ssh_config)
        )
    return AdminSlurm()
