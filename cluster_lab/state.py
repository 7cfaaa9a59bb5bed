"""What a running lab created on the host, written as it is created (`<labdir>/state.json`).

`lab down` and the crash cleanup of the next `lab up` remove exactly what is recorded here
(plus objects carrying this lab's prefix), and nothing else.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cluster_lab.config import LabConfig
from cluster_lab.host import ProcRef
from cluster_lab.nodes import CgroupHierarchy
from cluster_tool.fileio import atomic_write


@dataclass
class LabState:
    prefix: str
    bridge: str
    subnet: str
    lab_dir: str
    spec: str = ""
    base: str = ""
    complete: bool = False  # set once `lab up` finished; a record without it is a crash
    hierarchies: list[CgroupHierarchy] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    # name -> (pid, start time) for nodes (their supervisor) and services.
    nodes: dict[str, list[int]] = field(default_factory=dict)
    services: dict[str, list[int]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def node_ref(self, name: str) -> ProcRef | None:
        data = self.nodes.get(name)
        return ProcRef.from_json(data) if data else None

    def service_ref(self, name: str) -> ProcRef | None:
        data = self.services.get(name)
        return ProcRef.from_json(data) if data else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LabState:
        data = dict(data)
        data["hierarchies"] = [CgroupHierarchy(**h) for h in data.get("hierarchies", [])]
        return cls(**data)


def load_state(path: Path) -> LabState | None:
    try:
        return LabState.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, KeyError):
        # A torn or foreign file: treat as no record; cleanup by prefix still runs.
        return None


def save_state(path: Path, state: LabState) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(state.to_json(), indent=1, sort_keys=True) + "\n")


def running_lab(config: LabConfig) -> LabConfig:
    """`config` with the name prefix, bridge and subnet the lab in its folder was brought up
    with (`<labdir>/state.json`). Every command on a running lab goes through it: one that
    names only the lab's folder (CLUSTER_TOOL_LAB_DIR) must not restart ibsim in another
    lab's namespace, nor tear down the default prefix's namespaces and bridge."""
    state = load_state(config.state_file)
    if state is None:
        return config
    return dataclasses.replace(
        config,
        prefix=state.prefix,
        bridge=state.bridge,
        subnet=ipaddress.IPv4Network(state.subnet),
    )
