"""The storage phase's play order as Ansible reads it: an NFS server the spec makes of one of its
hosts is converged in a play of its own, before any play in which a client mounts it, whatever
`cluster_serial` is (in one play, a client in an early batch mounted a server a later batch had
not made yet)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from cluster_tool.render import render
from cluster_tool.spec import load_spec

REPO = Path(__file__).resolve().parents[3]
STORAGE = REPO / "playbooks" / "phases" / "storage.yml"
PLAY_LINE = re.compile(r"^\s*play #(\d+) \(([^)]*)\): (.*?)\s+TAGS:")
HOSTS_LINE = re.compile(r"^\s*hosts \((\d+)\):")


def _plays(spec: str, tmp_path: Path) -> list[tuple[str, set[str]]]:
    """(play name, its hosts) in playbook order, from `ansible-playbook --list-hosts`."""
    inventory = tmp_path / "inventory"
    render(load_spec(REPO / "examples" / spec), inventory)
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "false"}
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            str(inventory / "hosts.yml"),
            "--list-hosts",
            "-e",
            "cluster_serial=4",
            str(STORAGE),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    plays: list[tuple[str, set[str]]] = []
    lines = proc.stdout.splitlines()
    for i, line in enumerate(lines):
        if match := PLAY_LINE.match(line):
            plays.append((match.group(3), set()))
        elif (count := HOSTS_LINE.match(line)) and plays:
            hosts = lines[i + 1 : i + 1 + int(count.group(1))]
            plays[-1][1].update(h.strip() for h in hosts)
    return plays


def test_the_nfs_server_is_converged_alone_before_any_client(tmp_path: Path) -> None:
    # examples/h100-1su.yml: NFS served from head01 to 31 GPU nodes, login01 and mgmt01.
    plays = _plays("h100-1su.yml", tmp_path)
    first_with_server = next(i for i, (_, hosts) in enumerate(plays) if "head01" in hosts)
    first_with_client = next(i for i, (_, hosts) in enumerate(plays) if "gpu001" in hosts)
    assert plays[first_with_server][1] == {"head01"}
    assert first_with_server < first_with_client
    # Every other host still gets the shared filesystem, in batches; the server only once.
    shared = [hosts for name, hosts in plays if "shared filesystem" in name]
    assert len(shared) == 1 and "head01" not in shared[0]
    assert {"gpu001", "gpu031", "login01"} <= shared[0]


def test_without_a_server_in_the_spec_every_host_is_a_client(tmp_path: Path) -> None:
    # examples/h200-4su.yml mounts a Lustre filesystem the site already runs.
    plays = _plays("h200-4su.yml", tmp_path)
    (shared,) = [hosts for name, hosts in plays if "shared filesystem" in name]
    assert {"gpu001", "head01"} <= shared
    assert all(not hosts for name, hosts in plays if "NFS server" in name)
