"""`cluster-tool lab inject` / `lab heal` against a lab directory: the model file changes, the
fabric simulator gets the console commands the fault needs, the sysfs trees follow, and
`--json` reports the fault id. The ibsim console is the one machine interface replaced: its
commands are recorded instead of sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cluster_lab import fabric
from cluster_lab import model as hw
from cluster_tool.cli import main
from tests.conftest import FIXTURES


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A lab directory holding the model part 1 builds from examples/lab.yml."""
    lab_dir = tmp_path / "lab"
    data = json.loads((FIXTURES / "sim" / "lab-model.json").read_text())
    hw.save(lab_dir / "model", hw.HardwareModel.model_validate(data))
    monkeypatch.setenv("CLUSTER_TOOL_LAB_DIR", str(lab_dir))
    console: list[str] = []
    monkeypatch.setattr(
        fabric, "send_command", lambda config, command, **_: console.append(command) or ""
    )
    return {"dir": lab_dir, "console": console}


def _model(lab: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((lab["dir"] / "model" / "model.json").read_text())
    return data


def _hca(data: dict[str, Any], node: str, device: str) -> dict[str, Any]:
    n = next(n for n in data["nodes"] if n["name"] == node)
    return next(h for h in n["hcas"] if h["device"] == device)


def test_cable_swap_recables_ibsim_and_heals(
    lab: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    before = _model(lab)
    assert main(["lab", "inject", "cable-swap", "gpu001", "mlx5_0", "mlx5_3", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["id"] == "cable-swap-1" and "undo" not in record
    after = _model(lab)
    assert _hca(after, "gpu001", "mlx5_0")["leaf"] == "su1-leaf-r1"
    assert [f["id"] for f in after["faults"]] == ["cable-swap-1"]
    assert lab["console"] == [
        'Unlink "gpu001 mlx5_0"[1]',
        'Unlink "gpu001 mlx5_3"[1]',
        'Link "gpu001 mlx5_0"[1] "su1-leaf-r1"[1]',
        'Link "gpu001 mlx5_3"[1] "su1-leaf-r0"[1]',
    ]
    lab["console"].clear()
    assert main(["lab", "heal", "cable-swap-1"]) == 0
    healed = _model(lab)
    assert healed["nodes"] == before["nodes"] and healed["faults"] == []
    assert lab["console"][-2:] == [
        'Link "gpu001 mlx5_0"[1] "su1-leaf-r0"[1]',
        'Link "gpu001 mlx5_3"[1] "su1-leaf-r1"[1]',
    ]


def test_link_down_unlinks_and_writes_the_sysfs_tree(lab: dict[str, Any]) -> None:
    assert main(["lab", "inject", "link-down", "gpu002", "mlx5_4"]) == 0
    assert lab["console"] == ['Unlink "gpu002 mlx5_4"[1]']
    state = lab["dir"] / "nodes" / "gpu002" / "sysfs-class" / "infiniband" / "mlx5_4" / "ports"
    assert (state / "1" / "state").read_text() == "1: DOWN\n"
    assert main(["lab", "heal", "--all"]) == 0
    assert lab["console"][-1] == 'ReLink "gpu002 mlx5_4"[1]'
    assert (state / "1" / "state").read_text() == "4: ACTIVE\n"


def test_port_errors_and_spine_link_down_reach_ibsim(lab: dict[str, Any]) -> None:
    assert main(["lab", "inject", "port-errors", "gpu003", "mlx5_5", "--symbol", "4321"]) == 0
    link = _model(lab)["spine_links"][0]
    assert main(["lab", "inject", "spine-link-down", link["leaf"], str(link["leaf_port"])]) == 0
    assert lab["console"] == [
        'PerformanceSet "gpu003 mlx5_5"[1] PortCounters.SymbolErrorCounter=4321',
        f'Unlink "{link["leaf"]}"[{link["leaf_port"]}]',
    ]
    assert main(["lab", "heal", "--all"]) == 0
    assert lab["console"][2:] == [
        f'ReLink "{link["leaf"]}"[{link["leaf_port"]}]',
        'PerformanceSet "gpu003 mlx5_5"[1] PortCounters.SymbolErrorCounter=0',
    ]


def test_gpu_faults_change_only_the_model(lab: dict[str, Any]) -> None:
    assert main(["lab", "inject", "gpu-ecc", "gpu001", "3", "--count", "2"]) == 0
    assert main(["lab", "inject", "gpu-hot", "gpu001", "5", "97"]) == 0
    assert lab["console"] == []
    gpus = next(n for n in _model(lab)["nodes"] if n["name"] == "gpu001")["gpus"]
    assert gpus[3]["ecc"]["volatile_dbe"] == 2 and gpus[5]["temperature_c"] == 97
    # The model still loads as part 1's schema (extra keys allowed).
    assert hw.load(lab["dir"] / "model").node("gpu001").gpus[3].ecc.volatile_dbe == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["lab", "inject", "melt", "gpu001"],
        ["lab", "inject", "link-down", "gpu001"],
        ["lab", "inject", "link-degrade", "gpu001", "mlx5_0"],
        ["lab", "inject", "link-down", "gpu009", "mlx5_0"],
        ["lab", "heal"],
        ["lab", "heal", "link-down-7"],
    ],
)
def test_bad_requests_are_usage_errors(lab: dict[str, Any], argv: list[str]) -> None:
    assert main(argv) == 2
    assert lab["console"] == []


def test_no_lab_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTER_TOOL_LAB_DIR", str(tmp_path / "none"))
    assert main(["lab", "inject", "slow-node", "gpu001", "0.5"]) == 2


def test_link_degrade_restarts_the_fabric_from_the_model(
    lab: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from cluster_lab import lifecycle

    restarts: list[str] = []

    def restart(config: Any) -> None:
        # What restart_fabric builds ibsim from: the model as saved by now.
        restarts.append(fabric.net_file(hw.load(config.model_dir)))

    monkeypatch.setattr(lifecycle, "restart_fabric", restart)
    assert main(["lab", "inject", "link-degrade", "gpu004", "mlx5_9", "--width", "1X"]) == 0
    assert len(restarts) == 1 and '"gpu004 mlx5_9"' in restarts[0]
    port = _hca(_model(lab), "gpu004", "mlx5_9")["port"]
    assert (port["width"], port["rate_gbps"]) == ("1X", 50)
    line = next(x for x in restarts[0].splitlines() if x.startswith("[") and "gpu004 mlx5_9" in x)
    assert line.endswith("1xHDR")
    assert main(["lab", "heal", "--all"]) == 0
    assert len(restarts) == 2 and lab["console"] == []


def test_a_fault_acts_on_the_lab_in_the_folder_whatever_the_environment_says(
    lab: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """CLUSTER_TOOL_LAB_DIR alone names the lab: its recorded prefix, bridge and subnet win
    over the defaults (a test lab `cti` on 10.82.0.0/24, not the default `ctl` namespaces)."""
    from cluster_lab import lifecycle
    from cluster_lab.state import LabState, save_state

    save_state(
        lab["dir"] / "state.json",
        LabState(prefix="cti", bridge="ctilab0", subnet="10.82.0.0/24", lab_dir=str(lab["dir"])),
    )
    seen: list[tuple[str, str, str]] = []
    monkeypatch.setattr(
        lifecycle,
        "restart_fabric",
        lambda config: seen.append((config.prefix, config.bridge, str(config.subnet))),
    )
    monkeypatch.delenv("CLUSTER_TOOL_LAB_PREFIX", raising=False)
    assert main(["lab", "inject", "link-degrade", "gpu004", "mlx5_9", "--width", "2X"]) == 0
    assert main(["lab", "heal", "--all"]) == 0
    assert seen == [("cti", "ctilab0", "10.82.0.0/24")] * 2
