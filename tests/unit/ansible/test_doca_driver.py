"""DOCA installed but its driver not loaded (issue 18, finding 4, role side): after the install
the inbox mlx5_core stays loaded until openibd restarts (DOCA-Host installation steps end with
`/etc/init.d/openibd restart`); the role restarts openibd when DOCA changed and then refuses to
go on while the loaded mlx5_core (/sys/module/mlx5_core/version; the inbox module of current
kernels sets none) is not the one modinfo finds (DOCA's DKMS build): after restarting openibd
itself once when the handler never ran (an interrupted run). The lab reproduces the trap
(tests/lab/test_role_traps.py)."""

from __future__ import annotations

from pathlib import Path

from cluster_tool.ansible import run_playbook

CHECK = Path(__file__).parent / "playbooks" / "doca_driver.yml"
DOCA = "24.10-1.1.4"


def _check(tmp_path: Path, loaded: str | None) -> list[str]:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        "      ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
    )
    version_file = tmp_path / "mlx5_core-version"
    if loaded is not None:
        version_file.write_text(loaded + "\n")
    result = run_playbook(
        CHECK,
        inventory,
        extravars={
            "__doca_ofed_loaded_version_file": str(version_file),
            "__doca_ofed_modinfo_version": ["echo", DOCA],
            # openibd is not this controller's to restart: the check alone (the lab's converged
            # bring-up runs the restart).
            "doca_ofed_manage_openibd": False,
        },
        private_data_dir=tmp_path / "pdd",
        fact_cache=tmp_path / "facts",
    )
    return [e.message or "" for e in result.events if e.failed]


def test_the_inbox_driver_still_loaded_stops_the_role_with_the_fix(tmp_path: Path) -> None:
    (failed,) = _check(tmp_path, None)
    assert "the loaded mlx5_core is the inbox driver (no version)" in failed
    assert f"DOCA's is {DOCA}" in failed and "restart openibd or reboot" in failed


def test_an_older_mlx5_core_still_loaded_is_named(tmp_path: Path) -> None:
    (failed,) = _check(tmp_path, "24.07-0.6.1")
    assert "the loaded mlx5_core is 24.07-0.6.1" in failed


def test_docas_driver_loaded_passes(tmp_path: Path) -> None:
    assert _check(tmp_path, DOCA) == []
