"""Rendering: golden files, determinism, atomic replacement, --diff, and what roles rely on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cluster_tool.cli import main
from cluster_tool.render import diff_rendered, render, render_files
from cluster_tool.render.engine import RenderError, load_rendered_yaml
from cluster_tool.render.output_dir import MARKER
from cluster_tool.spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
GOLDEN = ROOT / "tests" / "fixtures" / "golden" / "h100-1su"
# Set to regenerate the golden files after an intended change, then review the git diff.
UPDATE = os.environ.get("CLUSTER_TOOL_UPDATE_GOLDEN") == "1"


@pytest.fixture(scope="module")
def h100_files() -> dict[str, str]:
    return render_files(load_spec(EXAMPLES / "h100-1su.yml"))


def test_golden_files(h100_files: dict[str, str]) -> None:
    if UPDATE:
        for rel, text in h100_files.items():
            (GOLDEN / rel).parent.mkdir(parents=True, exist_ok=True)
            (GOLDEN / rel).write_text(text, encoding="utf-8")
    golden = {str(p.relative_to(GOLDEN)) for p in GOLDEN.rglob("*") if p.is_file()}
    assert golden == set(h100_files), "rendered file set changed"
    for rel, text in h100_files.items():
        assert (GOLDEN / rel).read_text(encoding="utf-8") == text, rel


def test_committed_example_inventory_is_current(h100_files: dict[str, str]) -> None:
    example = ROOT / "inventory" / "example"
    committed = {str(p.relative_to(example)) for p in example.rglob("*") if p.is_file()}
    assert committed == {*h100_files, MARKER}  # the marker: a folder render made
    for rel, text in h100_files.items():
        assert (example / rel).read_text(encoding="utf-8") == text, (
            f"inventory/example/{rel} is stale: "
            "cluster-tool render examples/h100-1su.yml -o inventory/example"
        )


def test_same_spec_same_bytes() -> None:
    first = render_files(load_spec(EXAMPLES / "h200-4su.yml"))
    second = render_files(load_spec(EXAMPLES / "h200-4su.yml"))
    assert first == second


def test_inventory_groups_and_host_vars(h100_files: dict[str, str]) -> None:
    inventory = load_rendered_yaml(h100_files["hosts.yml"])["all"]
    host = inventory["hosts"]["gpu017"]
    assert host == {
        "ansible_host": "10.10.1.17",
        "bmc_address": "10.11.1.17",
        "su": 1,
        "index_in_su": 17,
        "node_profile": "hgx-h100-8x-ndr",
        "node_os": "ubuntu2204",
    }
    groups = inventory["children"]
    assert list(groups["slurm_controller"]["hosts"]) == ["head01"]
    assert list(groups["slurmdbd"]["hosts"]) == ["head01"]
    assert list(groups["subnet_manager"]["hosts"]) == ["head01"]
    assert list(groups["login"]["hosts"]) == ["login01", "login02"]
    assert len(groups["gpu"]["hosts"]) == 31
    assert len(groups["su1"]["hosts"]) == 31
    group_vars = load_rendered_yaml(h100_files["group_vars/all.yml"])
    # Roles take group names from here instead of hard-coding them.
    assert group_vars["cluster_groups"]["gpu"] == "gpu"
    assert group_vars["cluster_groups"]["su"] == ["su1"]
    for role_group in ("slurm_controller", "slurmdbd", "login", "gpu", "subnet_manager"):
        assert group_vars["cluster_groups"][role_group] in groups


def test_secrets_are_references_only(h100_files: dict[str, str]) -> None:
    group_vars = load_rendered_yaml(h100_files["group_vars/all.yml"])
    assert group_vars["cluster_bmc_credentials"] == {
        "username": "env:CLUSTER_BMC_USERNAME",
        "password": "vault:vault_bmc_password",
    }


def test_slurm_lines_come_from_the_profile(h100_files: dict[str, str]) -> None:
    nodes = h100_files["slurm/nodes.conf"]
    assert (
        "NodeName=gpu[001-031] CPUs=224 Boards=1 SocketsPerBoard=2 CoresPerSocket=56 "
        "ThreadsPerCore=2 RealMemory=2000000 Gres=gpu:h100:8 " in nodes
    )
    assert "PartitionName=gpu Nodes=gpu[001-031] Default=YES" in nodes
    gres = h100_files["slurm/gres.conf"]
    assert "NodeName=gpu[001-031] Name=gpu Type=h100 File=/dev/nvidia[0-3] Cores=0-55" in gres
    assert "NodeName=gpu[001-031] Name=gpu Type=h100 File=/dev/nvidia[4-7] Cores=56-111" in gres


def test_topology_is_one_switch_per_su_under_the_spines() -> None:
    files = render_files(load_spec(EXAMPLES / "h200-4su.yml"))
    lines = [line for line in files["slurm/topology.conf"].splitlines() if line[:1] != "#"]
    assert lines == [
        "SwitchName=su1 Nodes=gpu[001-032]",
        "SwitchName=su2 Nodes=gpu[033-064]",
        "SwitchName=su3 Nodes=gpu[065-096]",
        "SwitchName=su4 Nodes=gpu[097-127]",
        "SwitchName=spines Switches=su1,su2,su3,su4",
    ]


def test_nccl_conf_names_the_compute_hcas_exactly(h100_files: dict[str, str]) -> None:
    env = dict(
        line.split("=", 1) for line in h100_files["nccl.conf"].splitlines() if line[:1] != "#"
    )
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11"
    assert env["NCCL_SOCKET_IFNAME"] == "=eno1"
    # Issue 29: CollNet is per job (the gate's step, the planner's launch), never in the
    # nccl.conf every container mounts, SHARP fabric or not.
    assert "NCCL_COLLNET_ENABLE" not in env
    sharp = render_files(load_spec(EXAMPLES / "h200-4su.yml"))["nccl.conf"]
    assert "NCCL_COLLNET_ENABLE" not in sharp and "SHARP_COLL_ENABLE_SAT=1" in sharp


def test_group_vars_give_each_profiles_compute_hcas_by_pci_address(
    h100_files: dict[str, str],
) -> None:
    """What the doca_ofed role checks a node against: each compute HCA at its PCI address (the
    DGX H100 User Guide's OSFP ports: mlx5_0 at bus 0x18 for GPU0 ... mlx5_11 at 0xdc for GPU7),
    and the storage/in-band ports apart, never among them."""
    group_vars = load_rendered_yaml(h100_files["group_vars/all.yml"])
    profile = group_vars["cluster_node_profiles"]["hgx-h100-8x-ndr"]
    hcas = {h["device"]: (h["pci"], h["rail"]) for h in profile["compute_hcas"]}
    assert hcas["mlx5_0"] == ("0000:18:00.0", 0)
    assert hcas["mlx5_3"] == ("0000:40:00.0", 1)
    assert hcas["mlx5_11"] == ("0000:dc:00.0", 7)
    assert len(hcas) == 8
    assert {n["device"] for n in profile["nics"]} == {"mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"}
    hosts = load_rendered_yaml(h100_files["hosts.yml"])
    assert hosts["all"]["hosts"]["gpu001"]["node_profile"] == "hgx-h100-8x-ndr"


def test_nccl_tests_jobs(h100_files: dict[str, str]) -> None:
    job = h100_files["nccl-tests/all_reduce.sbatch"]
    assert job.startswith("#!/bin/bash\n")
    assert "#SBATCH --ntasks-per-node=8" in job
    assert "srun --mpi=pmix" in job
    assert "/opt/nccl-tests/build/all_reduce_perf" in job
    assert "-g 1" in job  # one GPU per task
    assert {f for f in h100_files if f.startswith("nccl-tests/")} == {
        f"nccl-tests/{c}.sbatch" for c in ("all_reduce", "all_gather", "reduce_scatter", "alltoall")
    }


def test_ansible_vars_are_merged_last(tmp_path: Path) -> None:
    text = (EXAMPLES / "lab.yml").read_text()
    text += "ansible_vars:\n  cuda_repo_url: http://10.77.0.1/repo/\n  lab_extra: 1\n"
    spec = tmp_path / "lab.yml"
    spec.write_text(text)
    group_vars = load_rendered_yaml(render_files(load_spec(spec))["group_vars/all.yml"])
    assert group_vars["cuda_repo_url"] == "http://10.77.0.1/repo/"
    assert group_vars["lab_extra"] == 1


def test_render_replaces_the_folder_and_reports_changes(tmp_path: Path) -> None:
    out = tmp_path / "inv"
    cluster = load_spec(EXAMPLES / "lab.yml")
    first = render(cluster, out)
    assert first.changed == first.files
    # A file an earlier render wrote (a collective the spec no longer names) goes; a file of
    # the operator's is never deleted (tests/unit/render/test_render_output_folder.py).
    (out / "nccl-tests" / "broadcast.sbatch").write_text("left over")
    second = render(cluster, out)
    assert second.changed == ["nccl-tests/broadcast.sbatch"]
    assert not (out / "nccl-tests" / "broadcast.sbatch").exists()
    assert render(cluster, out).changed == []
    assert [p.name for p in tmp_path.iterdir()] == ["inv"]  # no temp folders left behind


def test_failed_render_leaves_previous_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "inv"
    cluster = load_spec(EXAMPLES / "lab.yml")
    render(cluster, out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    real_write = Path.write_text
    calls = {"n": 0}

    def flaky(self: Path, *args: object, **kwargs: object) -> int:
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError(28, "No space left on device")
        return real_write(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", flaky)
    h100 = load_spec(EXAMPLES / "h100-1su.yml")
    with pytest.raises(RenderError, match="previous output kept"):
        render(h100, out)
    monkeypatch.undo()
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["inv"]


def test_diff_shows_changes_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "inv"
    render(load_spec(EXAMPLES / "lab.yml"), out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    text = (EXAMPLES / "lab.yml").read_text().replace("gpu[001-004]", "gpu[001-003]")
    spec = tmp_path / "lab3.yml"
    spec.write_text(text)
    result = diff_rendered(load_spec(spec), out)
    diff = "".join(result.diff)
    assert "-gpu004,mlx5_0,0,0,1,su1-leaf-r0,4\n" in diff
    assert "+++ b/cabling.csv" in diff
    assert "cabling.csv" in result.changed
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert diff_rendered(load_spec(EXAMPLES / "lab.yml"), out).diff == []


def test_cli_render_and_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "inv"
    assert main(["render", str(EXAMPLES / "lab.yml"), "-o", str(out), "--json"]) == 0
    assert (out / "cabling.csv").is_file()
    capsys.readouterr()
    assert main(["render", str(EXAMPLES / "lab.yml"), "-o", str(out), "--diff"]) == 0
    assert capsys.readouterr().out == ""


def test_cli_render_bad_spec_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("apiVersion: cluster-tool/v1\nkind: Cluster\n")
    assert main(["render", str(bad), "-o", str(tmp_path / "inv")]) == 2
    assert not (tmp_path / "inv").exists()


def test_render_refuses_to_replace_a_folder_it_did_not_write(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("precious")
    with pytest.raises(RenderError, match="refusing"):
        render(load_spec(EXAMPLES / "lab.yml"), home)
    assert (home / "notes.txt").read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]
