"""Time the preflight's SSH check of a fleet whose hosts do not answer, against asking them one
after another, in one run.

Each host is a real OpenSSH session (`ssh -o ConnectTimeout=... HOST true`) toward an address
that drops packets: the transport's ConnectTimeout is all a dead host costs, and the preflight
pays it once for the fleet, not once per host. The address is a TEST-NET-1 one (RFC 5737,
192.0.2.0/24), which no host answers; on a machine with no route to it ssh fails at once and the
two figures measure only process start-up (the script says which it saw).
Run: .venv/bin/python benchmarks/preflight.py [--hosts N] [--connect-timeout S]
"""

from __future__ import annotations

import argparse
import contextlib
import time

from cluster_tool.remote.fanout import OpenSshTransport, Target, TransportError
from cluster_tool.workflows.preflight import ssh_round


def serial(targets: list[Target], transport: OpenSshTransport) -> None:
    for target in targets:
        with contextlib.suppress(TransportError):  # each one's cost is what is timed
            transport.run(target, "true\n", 30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--connect-timeout", type=float, default=2.0)
    args = parser.parse_args()
    transport = OpenSshTransport(connect_timeout=args.connect_timeout)
    targets = [Target(f"gpu{i:03d}", f"192.0.2.{i}") for i in range(1, args.hosts + 1)]

    started = time.monotonic()
    # The round as the preflight runs it: each GPU node also asked its hardware probes.
    down, _ = ssh_round(targets, transport, hardware={t.name for t in targets})
    parallel_s = time.monotonic() - started
    started = time.monotonic()
    serial(targets, transport)
    serial_s = time.monotonic() - started

    why = next(iter(down.values()), "none")
    print(f"{args.hosts} hosts, ConnectTimeout {args.connect_timeout:g} s; ssh said: {why}")
    print(f"preflight (all at once): {parallel_s:6.2f} s  ({len(down)} unreachable)")
    print(f"one after another:       {serial_s:6.2f} s")
    print(f"ratio: {serial_s / parallel_s:.1f}x")


if __name__ == "__main__":
    main()
