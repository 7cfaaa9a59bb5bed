"""Time the health collection through pyinfra (its API and SSH connector, pyinfra_fanout.py)
beside today's transports (paramiko, OpenSSH) in one run, and print the ratios.

Issue 15's rule: pyinfra becomes the live path if it is within 1.2x of today's transport. Run in
the tool's process it was not (1.27x-1.42x paramiko in three runs here, the commit that removed
the pin lists them), so the tool does not depend on pyinfra: `pip install pyinfra==3.10.0` to
measure again.

Run (as root): `.venv/bin/python benchmarks/fanout.py [--repeat N] [--hosts N]`. Targets: the lab's
nodes when a lab is up (CLUSTER_TOOL_LAB_DIR, default `<repo>/.lab`, and its ssh_config; read
only), else N localhost targets served by one private sshd on 127.0.0.1 started for the run in
its own mount namespace (so its /run/sshd exists only there; nothing on the machine changes;
needs `unshare`). Every transport carries the same composite probe script, one SSH session per
host, and each round dials every host afresh. pyinfra is measured twice: in this process, as
the tool would run it (gevent without monkey-patching: its SSH handshakes run one after another),
in a child process that monkey-patches first as pyinfra's own CLI does (the child's start not
counted), and in a fresh such child per collection (its start counted: a live path that gave
pyinfra a process of its own would pay it). Medians of `--repeat` rounds; the order of the
transports rotates per round. Never a test assertion.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cluster_tool.probes import Probe  # noqa: E402
from cluster_tool.probes.fabric import FABRIC_PROBES  # noqa: E402
from cluster_tool.probes.node import HEALTH_PROBES, health_probes  # noqa: E402
from cluster_tool.remote.fanout import (  # noqa: E402
    HostResult,
    OpenSshTransport,
    ParamikoTransport,
    Target,
    collect,
)

PROBES = health_probes(dcgm=False)
Jobs = list[tuple[Target, Sequence[Probe]]]


def lab_jobs() -> tuple[Jobs, Path, str] | None:
    """The lab's GPU nodes (health probes) and head (fabric probes), if a lab is up."""
    try:
        from cluster_lab import lifecycle
        from cluster_lab.config import LabConfig
    except ImportError:
        return None
    config = LabConfig.from_env()
    status = lifecycle.status(config)
    if not status.running or not status.nodes:
        return None
    jobs: Jobs = [(Target(n.name), PROBES) for n in status.nodes if n.role == "gpu"]
    jobs += [(Target(n.name), FABRIC_PROBES) for n in status.nodes if n.role == "head"]
    return jobs, Path(status.ssh_config), f"the lab in {config.lab_dir}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def localhost_sshd(folder: Path, hosts: int) -> tuple[subprocess.Popen[bytes], Path]:
    """One sshd on 127.0.0.1 for the run and an ssh_config naming `hosts` targets on it."""
    sshd, unshare = shutil.which("sshd") or "/usr/sbin/sshd", shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None or not Path(sshd).exists():
        raise SystemExit("needs a lab, or root with sshd and unshare for localhost targets")
    for key in ("host_key", "client_key"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / key)], check=True
        )
    (folder / "authorized_keys").write_text((folder / "client_key.pub").read_text())
    port = _free_port()
    (folder / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder}/host_key\n"
        f"AuthorizedKeysFile {folder}/authorized_keys\nPidFile {folder}/sshd.pid\n"
        "UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nMaxStartups 1000\nMaxSessions 1000\nLogLevel ERROR\n"
    )
    # sshd wants its privilege-separation folder /run/sshd: a tmpfs /run of its own.
    daemon = subprocess.Popen(
        [
            unshare,
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            f"mount -t tmpfs none /run && mkdir /run/sshd && exec {sshd} -D -e "
            f"-f {folder}/sshd_config",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    names = [f"bench{i:03d}" for i in range(1, hosts + 1)]
    config = folder / "ssh_config"
    config.write_text(
        f"Host {' '.join(names)}\n    HostName 127.0.0.1\n    Port {port}\n    User root\n"
        f"    IdentityFile {folder}/client_key\n    IdentitiesOnly yes\n"
        "    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n    LogLevel ERROR\n"
    )
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return daemon, config
        if daemon.poll() is not None:
            raise SystemExit(f"sshd did not start: {daemon.stderr.read().decode()[-300:]}")  # type: ignore[union-attr]
        time.sleep(0.05)
    raise SystemExit("sshd did not listen")


def _checked(results: dict[str, HostResult]) -> None:
    bad = {h: r.error for h, r in results.items() if not r.reachable}
    if bad:
        raise SystemExit(f"unreachable: {bad}")


def measure(
    ways: dict[str, Callable[[], dict[str, HostResult]]], repeat: int
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in ways}
    names = list(ways)
    for name in names:  # one unmeasured round: imports, key loading
        _checked(ways[name]())
    for round_ in range(repeat):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            t0 = time.perf_counter()
            _checked(ways[name]())
            times[name].append(time.perf_counter() - t0)
    return times


def pyinfra_patched_child(jobs: Jobs, ssh_config: Path, repeat: int) -> list[float]:
    """pyinfra as its CLI runs it (gevent monkey-patched), timed inside a child process."""
    spec = json.dumps(
        {
            "hosts": [[t.name, [p.name for p in probes]] for t, probes in jobs],
            "ssh_config": str(ssh_config),
            "repeat": repeat,
        }
    )
    proc = subprocess.run(
        [sys.executable, __file__, "--patched-child"],
        input=spec,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"patched pyinfra child failed: {proc.stderr.strip()[-500:]}")
    return [float(t) for t in json.loads(proc.stdout.strip().splitlines()[-1])]


def pyinfra_worker(jobs: Jobs, ssh_config: Path) -> dict[str, HostResult]:
    """One collection in a fresh monkey-patched process, its start counted: what a live path
    that hands pyinfra its own process would pay."""
    spec = json.dumps(
        {
            "hosts": [[t.name, [p.name for p in probes]] for t, probes in jobs],
            "ssh_config": str(ssh_config),
            "repeat": 0,
        }
    )
    proc = subprocess.run(
        [sys.executable, __file__, "--patched-child"],
        input=spec,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"patched pyinfra worker failed: {proc.stderr.strip()[-500:]}")
    unreachable = json.loads(proc.stdout.strip().splitlines()[-1])
    return {h: HostResult(h, error="unreachable") for h in unreachable}


def _patched_child() -> int:
    from gevent import monkey

    monkey.patch_all()
    from pyinfra_fanout import collect_with_pyinfra

    spec = json.loads(sys.stdin.read())
    by_name = {p.name: p for p in (*HEALTH_PROBES, *FABRIC_PROBES)}
    jobs = [(Target(h), [by_name[n] for n in names]) for h, names in spec["hosts"]]
    ssh_config = Path(spec["ssh_config"])
    if spec["repeat"] == 0:  # the worker: one collection, the hosts that did not answer
        results = collect_with_pyinfra(jobs, ssh_config=ssh_config, concurrency=len(jobs))
        print(json.dumps([h for h, r in results.items() if not r.reachable]))
        return 0
    times = measure(
        {
            "pyinfra": lambda: collect_with_pyinfra(
                jobs, ssh_config=ssh_config, concurrency=len(jobs)
            )
        },
        spec["repeat"],
    )
    print(json.dumps(times["pyinfra"]))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--hosts", type=int, default=16, help="localhost targets when no lab is up")
    ap.add_argument("--patched-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.patched_child:
        return _patched_child()

    try:
        from pyinfra_fanout import collect_with_pyinfra
    except ImportError as exc:
        raise SystemExit(f"{exc}: `pip install pyinfra==3.10.0` to compare with pyinfra") from None

    with tempfile.TemporaryDirectory(prefix="fanout-bench-") as tmp:
        daemon = None
        found = lab_jobs()
        if found is not None:
            jobs, ssh_config, where = found
        else:
            daemon, ssh_config = localhost_sshd(Path(tmp), args.hosts)
            names = [f"bench{i:03d}" for i in range(1, args.hosts + 1)]
            jobs = [(Target(n), PROBES) for n in names]
            where = f"{args.hosts} localhost sshd targets (no lab up)"
        try:
            width = len(jobs)
            ways: dict[str, Callable[[], dict[str, HostResult]]] = {
                "paramiko": lambda: collect(jobs, ParamikoTransport(ssh_config), concurrency=width),
                "OpenSSH": lambda: collect(jobs, OpenSshTransport(ssh_config), concurrency=width),
                "pyinfra": lambda: collect_with_pyinfra(
                    jobs, ssh_config=ssh_config, concurrency=width
                ),
                "pyinfra, patched worker": lambda: pyinfra_worker(jobs, ssh_config),
            }
            times = measure(ways, args.repeat)
            times["pyinfra, monkey-patched"] = pyinfra_patched_child(jobs, ssh_config, args.repeat)
            sample = collect([jobs[0]], ParamikoTransport(ssh_config))[jobs[0][0].name]
        finally:
            if daemon is not None:
                os.killpg(daemon.pid, signal.SIGTERM)
                daemon.wait(timeout=10)

    median = {name: statistics.median(t) for name, t in times.items()}
    today = min(("paramiko", "OpenSSH"), key=median.__getitem__)
    probes = len(jobs[0][1])
    print(f"{len(jobs)} hosts x {probes} probes on {where}; median of {args.repeat} rounds")
    print(
        f"probes that ran on {jobs[0][0].name}: "
        + ", ".join(n for n, o in sample.outputs.items() if not o.not_installed)
    )
    for name, took in median.items():
        spread = f"{min(times[name]):.3f}-{max(times[name]):.3f}"
        print(f"{name:<24} {took:7.3f} s  (rounds {spread})  {took / median[today]:.2f}x {today}")
    ratio = median["pyinfra"] / median[today]
    verdict = "within" if ratio <= 1.2 else "beyond"
    print(
        f"pyinfra as the tool runs it: {ratio:.2f}x today's fastest transport ({today}), "
        f"{verdict} issue 15's 1.2x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
