"""A role's argument spec accepts what its tasks read (issue 18, finding 12: doca_ofed_mlxconfig
was declared a list of strings while configure.yml reads item.device and item.settings)."""

from __future__ import annotations

from pathlib import Path

from cluster_tool.ansible import run_playbook

VALIDATE = Path(__file__).parent / "playbooks" / "argument_spec.yml"


def _validate(tmp_path: Path, role: str, provided: dict[str, object]) -> list[str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n")
    result = run_playbook(
        VALIDATE,
        inventory,
        extravars={"role_name": role, "provided": provided},
        private_data_dir=tmp_path / "pdd",
        fact_cache=tmp_path / "facts",
    )
    return [e.message or "" for e in result.events if e.failed]


def test_mlxconfig_takes_a_device_and_its_settings(tmp_path: Path) -> None:
    mlxconfig = [
        {"device": "mlx5_0", "settings": {"LINK_TYPE_P1": "IB", "ADVANCED_PCI_SETTINGS": 1}}
    ]
    assert _validate(tmp_path / "ok", "doca_ofed", {"doca_ofed_mlxconfig": mlxconfig}) == []


def test_mlxconfig_without_settings_is_refused_by_name(tmp_path: Path) -> None:
    failed = _validate(tmp_path, "doca_ofed", {"doca_ofed_mlxconfig": [{"device": "mlx5_0"}]})
    assert failed and "missing required arguments: settings" in failed[0], failed
