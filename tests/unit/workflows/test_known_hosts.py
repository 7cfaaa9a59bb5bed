"""The cluster's own known_hosts (issue 18, finding 11: ansible.cfg no longer turns host-key
checking off while the munge key is pushed). The real OpenSSH client talks to small SSH servers
on this machine (paramiko's server side: a key exchange with a chosen host key, then every login
refused), so the recording, the refusal of a changed key and the forgetting are OpenSSH's own."""

from __future__ import annotations

import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest

from cluster_tool.remote.known_hosts import HostKeyChanged, KnownHosts


class _LetIn(paramiko.ServerInterface):
    """Lets anyone in and answers every command with exit status 0 (a node that is up)."""

    def get_allowed_auths(self, username: str) -> str:
        return "publickey,none"

    def check_auth_none(self, username: str) -> int:
        return paramiko.common.AUTH_SUCCESSFUL

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.common.AUTH_SUCCESSFUL

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.common.OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        channel.send_exit_status(0)
        return True


class KeyServer:
    """An SSH server on 127.0.0.1 that answers with `key` (changeable) and lets nobody in, or
    (`let_in`) anyone, answering every command with exit status 0: a node that is up."""

    def __init__(self, let_in: bool = False) -> None:
        self.let_in = let_in
        self.key: paramiko.PKey = paramiko.Ed25519Key.from_private_key_file(_new_key())
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            # One thread per connection: a client that gives up on the key opens no channel.
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        transport = paramiko.Transport(conn)
        transport.add_server_key(self.key)
        try:
            transport.start_server(server=_LetIn() if self.let_in else paramiko.ServerInterface())
            channel = transport.accept(10) if self.let_in else None
            if channel is not None:
                time.sleep(0.2)
                channel.close()
        except (paramiko.SSHException, EOFError, OSError):
            transport.close()

    def new_key(self) -> None:
        """The host was re-installed: it answers with another key from now on."""
        self.key = paramiko.Ed25519Key.from_private_key_file(_new_key())

    def close(self) -> None:
        self._stop = True
        self.sock.close()


_KEYS: list[Path] = []


def _new_key() -> str:
    import subprocess
    import tempfile

    path = Path(tempfile.mkdtemp()) / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    _KEYS.append(path)
    return str(path)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[dict[str, KeyServer], Path]]:
    """Two nodes (their own SSH servers) and an ssh_config naming them, as a site's does."""
    nodes = {"gpu001": KeyServer(), "gpu002": KeyServer()}
    config = tmp_path / "ssh_config"
    config.write_text(
        "".join(
            f"Host {name}\n    HostName 127.0.0.1\n    Port {s.port}\n    User root\n"
            "    PreferredAuthentications publickey\n    IdentityFile /dev/null\n"
            for name, s in nodes.items()
        )
    )
    yield nodes, config
    for s in nodes.values():
        s.close()


def _recorded(known: KnownHosts) -> list[str]:
    return [line for line in known.path.read_text().splitlines() if line.strip()]


def test_first_contact_records_each_nodes_key_in_a_file_only_the_operator_reads(
    servers: Any, tmp_path: Path
) -> None:
    nodes, config = servers
    known = KnownHosts(tmp_path / "ctx" / "lab.known_hosts")
    refused = known.first_contact({n: n for n in nodes}, config)
    assert refused == {}
    assert len(_recorded(known)) == 2
    assert stat.S_IMODE(os.stat(known.path).st_mode) == 0o600
    # Contacted again with the same keys: still nothing refused, nothing added.
    assert known.first_contact({n: n for n in nodes}, config) == {}
    assert len(_recorded(known)) == 2


def test_a_changed_key_stops_the_run_before_anything_is_pushed(
    servers: Any, tmp_path: Path
) -> None:
    nodes, config = servers
    known = KnownHosts(tmp_path / "lab.known_hosts")
    known.first_contact({n: n for n in nodes}, config)
    nodes["gpu002"].new_key()
    refused = known.first_contact({n: n for n in nodes}, config)
    assert list(refused) == ["gpu002"]
    with pytest.raises(HostKeyChanged, match="gpu002"):
        known.check({n: n for n in nodes}, config)


def test_re_image_forgets_exactly_the_re_imaged_nodes_key(servers: Any, tmp_path: Path) -> None:
    nodes, config = servers
    known = KnownHosts(tmp_path / "lab.known_hosts")
    known.first_contact({n: n for n in nodes}, config)
    # Both nodes come back with new keys; only gpu001 was re-imaged.
    nodes["gpu001"].new_key()
    nodes["gpu002"].new_key()
    known.forget([f"[127.0.0.1]:{nodes['gpu001'].port}"])
    refused = known.first_contact({n: n for n in nodes}, config)
    assert list(refused) == ["gpu002"], "another node's changed key must still stop the run"
    assert known.first_contact({"gpu001": "gpu001"}, config) == {}
    assert not Path(f"{known.path}.old").exists(), "the forgotten key is not kept aside"
    assert stat.S_IMODE(os.stat(known.path).st_mode) == 0o600


def test_every_converge_checks_the_keys_and_re_image_forgets_only_its_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The converge edge of the workflows: each host of the lab spec answers from its own SSH
    server here (the ssh_config maps its address there), ansible-playbook is replaced by a
    recorder of what it was handed."""
    from cluster_tool.ansible.runner import HostStats, PlaybookResult
    from cluster_tool.spec.loader import load_spec
    from cluster_tool.workflows import live as live_module
    from cluster_tool.workflows.live import Live
    from cluster_tool.workflows.runs import RunRecord

    monkeypatch.setenv("CLUSTER_TOOL_CONTEXT_DIR", str(tmp_path / "contexts"))
    cluster = load_spec(Path(__file__).resolve().parents[3] / "examples" / "lab.yml")
    hosts = {h.name: str(h.address) for h in cluster.hosts()}
    nodes = {name: KeyServer() for name in hosts}
    config = tmp_path / "ssh_config"
    config.write_text(
        "".join(
            f"Host {address}\n    HostName 127.0.0.1\n    Port {nodes[name].port}\n"
            f"    HostKeyAlias {address}\n    IdentityFile /dev/null\n"
            for name, address in hosts.items()
        )
    )
    runs: list[dict[str, Any]] = []

    def ansible(playbook: Any, inventory: Any, **kwargs: Any) -> PlaybookResult:
        runs.append(kwargs)
        limit = kwargs["limit"].split(",") if kwargs["limit"] else list(hosts)
        return PlaybookResult(str(playbook), "successful", 0, {h: HostStats() for h in limit})

    monkeypatch.setattr(live_module, "run_playbook", ansible)
    record = RunRecord.create(tmp_path / "runs", "bringup", {})
    live = Live(cluster, tmp_path / "inventory", record, slurm=None, ssh_config=config)  # type: ignore[arg-type]
    try:
        live.converge(limit=None)
        known = KnownHosts.for_cluster("lab")
        assert runs[-1]["envvars"]["ANSIBLE_SSH_EXTRA_ARGS"] == (
            f"-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={known.path}"
        )
        assert len(_recorded(known)) == len(hosts)
        # gpu001 is re-imaged; gpu002 was re-installed behind the operator's back.
        nodes["gpu001"].new_key()
        nodes["gpu002"].new_key()
        assert live.converge_nodes(["gpu001"]) == {"gpu001": None}
        assert runs[-1]["limit"] == "gpu001"
        with pytest.raises(HostKeyChanged, match="gpu002"):
            live.converge(limit=None)
        assert len(runs) == 2, "nothing is pushed once a key changed"
    finally:
        for s in nodes.values():
            s.close()


def test_a_re_imaged_node_with_new_host_keys_comes_back(tmp_path: Path) -> None:
    """Re-image's wait for SSH: the node answers with the new keys of its fresh install. Checked
    through the cluster's known_hosts (its old keys forgotten first), it is back; through the
    operator's known_hosts, where OpenSSH in batch mode refuses an unknown or changed key, it
    would never come back (`ssh_true` alone, as re-image waited before)."""
    from cluster_tool.workflows.common import reimaged_node_answers, ssh_true

    node = KeyServer(let_in=True)
    try:
        config = tmp_path / "ssh_config"
        config.write_text(
            f"Host gpu003\n    HostName 127.0.0.1\n    Port {node.port}\n    User root\n"
            "    IdentityFile /dev/null\n"
        )
        known = KnownHosts(tmp_path / "ctx" / "lab.known_hosts")
        assert known.first_contact({"gpu003": "gpu003"}, config) == {}
        before = _recorded(known)
        assert len(before) == 1
        node.new_key()  # re-imaged
        address = f"[127.0.0.1]:{node.port}"
        assert not ssh_true("gpu003", config, options=known.ssh_options()), "a changed key"
        assert not ssh_true("gpu003", config), "the operator's known_hosts has no such key"
        assert reimaged_node_answers("gpu003", address, config, known)
        after = _recorded(known)
        assert len(after) == 1 and after != before, "the new key is recorded, the old one gone"
        assert stat.S_IMODE(os.stat(known.path).st_mode) == 0o600
    finally:
        node.close()


def test_the_fan_out_reaches_nodes_with_the_keys_the_cluster_recorded(tmp_path: Path) -> None:
    """validate's fan-out (both transports) and the workflows' checks read the cluster's
    known_hosts, where the converge's first contact recorded every node's key: a node the
    operator never logged in to is reached, and one whose key changed is refused. Through the
    operator's known_hosts alone (as before), the node the cluster knows is unreachable."""
    from cluster_tool.remote.fanout import (
        OpenSshTransport,
        ParamikoTransport,
        Target,
        TransportError,
    )

    node = KeyServer(let_in=True)
    try:
        config = tmp_path / "ssh_config"
        config.write_text(
            f"Host gpu003\n    HostName 127.0.0.1\n    Port {node.port}\n    User root\n"
            f"    IdentityFile {_new_key()}\n"
        )
        known = KnownHosts(tmp_path / "ctx" / "lab.known_hosts")
        assert known.first_contact({"gpu003": "gpu003"}, config) == {}
        target = Target("gpu003")
        for transport in (
            OpenSshTransport(config, known_hosts=known),
            ParamikoTransport(config, known_hosts=known),
        ):
            rc, _, _ = transport.run(target, "true\n", 20)
            assert rc == 0, transport
        for before in (OpenSshTransport(config), ParamikoTransport(config)):
            with pytest.raises(TransportError):
                before.run(target, "true\n", 20)
        node.new_key()
        for transport in (
            OpenSshTransport(config, known_hosts=known),
            ParamikoTransport(config, known_hosts=known),
        ):
            with pytest.raises(TransportError):
                transport.run(target, "true\n", 20)
    finally:
        node.close()
