"""Faults on a running lab: `lab inject` and `lab heal` change its hardware model (under the
model's lock) with the pure changes of `cluster_lab.faults`, then every view of the model that
is not read live: ibsim's cables and counters, node power, the sysfs trees.

Apart from `faults` so that the lab's lifecycle (which shows faults in `lab status`) and the
faults do not import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cluster_lab import fabric, lifecycle
from cluster_lab import model as hw
from cluster_lab.faults import hca_index, heal, heal_all, inject
from cluster_lab.sim.sysfs import write_all_sysfs_trees
from cluster_lab.state import running_lab

if TYPE_CHECKING:
    from cluster_lab.config import LabConfig


def _change_model(
    config: LabConfig, change: Callable[[dict[str, Any]], Any]
) -> tuple[Any, dict[str, Any]]:
    """Run `change` on the model's JSON form under the model lock and save the result."""
    result: list[Any] = []

    def apply(current: hw.HardwareModel) -> None:
        data = current.model_dump(mode="json")
        result.append(change(data))
        updated = hw.HardwareModel.model_validate(data)
        for name in type(current).model_fields:
            if name != "generation":
                setattr(current, name, getattr(updated, name))

    saved = hw.update(config.model_dir, apply)
    return result[0], saved.model_dump(mode="json")


def _recable(config: LabConfig, data: dict[str, Any], node: str, devices: list[str]) -> None:
    """Put the fabric simulator's cables of `devices` where the model now has them."""
    for device in devices:
        fabric.unlink_hca(config, node, device)
    for device in devices:
        n, i = hca_index(data, node, device)
        hca = data["nodes"][n]["hcas"][i]
        fabric.link_ports(config, f"{node} {device}", 1, hca["leaf"], int(hca["leaf_port"]))


def _fabric(config: LabConfig, data: dict[str, Any], record: dict[str, Any], healing: bool) -> None:
    """What the fault changes outside the model file: ibsim's cables and counters, power."""
    kind, args = record["kind"], record.get("args", record["target"].split())
    if kind == "cable-swap":
        _recable(config, data, args[0], [args[1], args[2]])
    elif kind == "cable-move":
        _recable(config, data, args[0], [args[1]])
    elif kind == "link-down":
        (fabric.relink_hca if healing else fabric.unlink_hca)(config, args[0], args[1])
    elif kind == "spine-link-down":
        (fabric.relink_port if healing else fabric.unlink_port)(config, args[0], int(args[1]))
    elif kind == "port-errors":
        n, i = hca_index(data, args[0], args[1])
        counters = data["nodes"][n]["hcas"][i]["port"].get("counters", {})
        value = int(counters.get("SymbolErrorCounter", 0))
        fabric.set_port_counter(config, f"{args[0]} {args[1]}", 1, "SymbolErrorCounter", value)
    elif kind == "node-down":
        if healing:
            lifecycle.power_on_node(config, args[0])
        else:
            lifecycle.power_off_node(config, args[0])
    elif kind == "link-degrade":
        # ibsim has no command that retrains a live link: rebuild its net file from the model.
        lifecycle.restart_fabric(config)
    # GPU, straggler, corruption and module faults live in the model alone: the simulators
    # read it live.


def _refresh_views(config: LabConfig, data: dict[str, Any]) -> None:
    write_all_sysfs_trees(data, config.nodes_dir)


def inject_fault(config: LabConfig, kind: str, *args: Any, **options: Any) -> dict[str, Any]:
    """`lab inject`: change the running lab's model, then every view of it (fabric simulator,
    sysfs trees, node power). Returns the fault record (with its id for `lab heal`)."""
    config = running_lab(config)
    record, data = _change_model(config, lambda d: inject(d, kind, *args, **options))
    _fabric(config, data, record, healing=False)
    _refresh_views(config, data)
    return dict(record)


def heal_faults(config: LabConfig, fault_id: str | None = None) -> list[dict[str, Any]]:
    """`lab heal`: undo one fault (or all, newest first) in the model and every view."""

    def undo(d: dict[str, Any]) -> list[dict[str, Any]]:
        return heal_all(d) if fault_id is None else [heal(d, fault_id)]

    config = running_lab(config)
    records, data = _change_model(config, undo)
    for record in records:
        _fabric(config, data, record, healing=True)
    _refresh_views(config, data)
    return list(records)
