"""The compatibility matrix holds versions against each rule kind; every figure here is read by
hand from the public source the rule cites (docs/compat.md lists them)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from cluster_tool.compat import MatrixError, evaluate, load_matrix, matches, numbers, parse_matrix

MATRIX = load_matrix()


def broken(known: dict[str, str]) -> dict[str, str]:
    """rule id -> the component it names, for every rule `known` breaks."""
    return {v.rule.id: v.component for v in evaluate(MATRIX, known)}


def test_every_shipped_rule_cites_a_public_source_checked_on_a_day() -> None:
    assert MATRIX.rules
    for rule in MATRIX.rules:
        assert rule.source.startswith("https://"), rule.id
        # Rules added on a later check carry the day they were read.
        assert rule.checked in (date(2026, 12, 1), date(2026, 12, 3)), rule.id
        assert rule.why.strip(), rule.id


def test_versions_match_component_wise_not_as_text() -> None:
    assert matches("12.4.1", "12.4") and matches("12.4", "12.4")
    assert not matches("12.40", "12.4")
    assert matches("connectx-7", "ConnectX-7") and not matches("ConnectX-8", "ConnectX-7")
    assert numbers("6.8.0-45-generic") == (6, 8, 0)
    assert numbers("550.127.08") == (550, 127, 8)


# --- range: CUDA 12.4 GA needs driver >= 550.54.14 (its runfile is
# cuda_12.4.0_550.54.14_linux.run); dma-buf needs Linux >= 5.12 ---------------------------


def test_range_cuda_needs_its_minimum_driver() -> None:
    assert broken({"cuda": "12.4", "nvidia_driver": "550.54.13"}) == {
        "cuda-12-4-min-driver": "nvidia_driver"
    }
    assert broken({"cuda": "12.4", "nvidia_driver": "550.54.14"}) == {}
    # CUDA 12.2 GA's minimum is 535.54.03: the 535 LTS branch runs it, not 12.4.
    assert broken({"cuda": "12.2", "nvidia_driver": "535.183.01"}) == {}
    assert "cuda-12-4-min-driver" in broken({"cuda": "12.4", "nvidia_driver": "535.183.01"})


def test_range_dmabuf_needs_kernel_5_12() -> None:
    known = {"gpudirect_mode": "dmabuf", "kernel": "5.10.0-30-amd64"}
    assert broken(known) == {"dmabuf-min-kernel": "kernel"}
    assert broken({**known, "kernel": "6.8.0-45-generic"}) == {}
    assert broken({**known, "gpudirect_mode": "peermem"}) == {}


def test_a_rule_with_an_unknown_component_is_not_evaluated() -> None:
    # Before install the kernel is unknown: the kernel rule waits for the read-back.
    assert broken({"gpudirect_mode": "dmabuf"}) == {}


# --- equal: fabric manager exactly the driver; pyxis built for the running Slurm ------------


def test_equal_fabric_manager_must_be_the_driver_version() -> None:
    violations = evaluate(MATRIX, {"fabricmanager": "550.127.05", "nvidia_driver": "550.127.08"})
    assert [(v.rule.id, v.component) for v in violations] == [
        ("fabricmanager-equals-driver", "fabricmanager")
    ]
    assert "fabricmanager 550.127.05 does not match nvidia_driver 550.127.08" in (
        violations[0].message
    )
    assert broken({"fabricmanager": "550.127.08", "nvidia_driver": "550.127.08"}) == {}


def test_equal_on_leading_parts_pyxis_and_slurm_release() -> None:
    assert broken({"pyxis_slurm": "23.11.10", "slurm": "24.05.5"}) == {
        "pyxis-built-for-slurm": "pyxis_slurm"
    }
    assert broken({"pyxis_slurm": "24.05.1", "slurm": "24.05.5"}) == {}


def test_equal_driver_branch_is_the_first_number() -> None:
    assert broken({"nvidia_driver_branch": "550", "nvidia_driver": "535.183.01"}) == {
        "driver-branch": "nvidia_driver_branch"
    }
    assert broken({"nvidia_driver_branch": "570", "nvidia_driver": "570.172.08"}) == {}


# --- requires: dma-buf needs the open modules; DOCA 2.9.2 ships ConnectX-7 28.43.2566 -------


def test_requires_open_modules_for_dmabuf() -> None:
    assert broken({"gpudirect_mode": "dmabuf", "nvidia_open_modules": "false"}) == {
        "dmabuf-open-modules": "nvidia_open_modules"
    }
    assert broken({"gpudirect_mode": "peermem", "nvidia_open_modules": "false"}) == {}


def test_requires_the_firmware_line_doca_ships() -> None:
    known = {"doca": "2.9.2", "hca_model": "ConnectX-7", "hca_firmware": "28.39.1002"}
    assert broken(known) == {"doca-2-9-connectx-7-firmware": "hca_firmware"}
    assert broken({**known, "hca_firmware": "28.43.2566"}) == {}
    assert broken({**known, "hca_model": "ConnectX-6"}) == {}


@pytest.mark.parametrize(
    ("doca", "bundled", "rule"),
    [
        # Each release's "General Support" page, ConnectX-7 row of the bundled firmware table.
        ("2.9.0", "28.43.1014", "doca-2-9-connectx-7-firmware"),
        ("2.9.1", "28.43.2026", "doca-2-9-connectx-7-firmware"),
        ("2.9.3", "28.43.3608", "doca-2-9-connectx-7-firmware"),
        ("2.10.0", "28.44.1036", "doca-2-10-connectx-7-firmware"),
        ("3.0.0", "28.45.1020", "doca-3-0-connectx-7-firmware"),
        ("3.1.0", "28.46.1006", "doca-3-1-connectx-7-firmware"),
        ("3.2.2", "28.47.2682", "doca-3-2-connectx-7-firmware"),
    ],
)
def test_each_doca_release_keeps_the_connectx_7_firmware_it_bundles(
    doca: str, bundled: str, rule: str
) -> None:
    known = {"doca": doca, "hca_model": "ConnectX-7", "hca_firmware": bundled}
    assert broken(known) == {}
    # The line before it (an adapter a firmware update skipped) breaks the rule.
    major, line, build = bundled.split(".")
    assert broken({**known, "hca_firmware": f"{major}.{int(line) - 1}.{build}"}) == {
        rule: "hca_firmware"
    }


def test_doca_2_10_is_not_held_to_the_2_1_line() -> None:
    # `2.1` must not match 2.10: versions match number by number.
    assert broken({"doca": "2.10.0", "hca_model": "ConnectX-7", "hca_firmware": "28.44.1036"}) == {}


# --- excludes: DOCA 2.9 and its LTS updates do not support ConnectX-8 ------------------------


def test_excludes_connectx_8_on_doca_2_9() -> None:
    violations = evaluate(MATRIX, {"doca": "2.9.1", "hca_model": "ConnectX-8"})
    assert [v.rule.id for v in violations] == ["doca-2-9-no-connectx-8"]
    assert "doca 2.9.1 does not support hca_model ConnectX-8" in violations[0].message
    assert broken({"doca": "3.0.0", "hca_model": "ConnectX-8"}) == {}
    assert broken({"doca": "2.9.1", "hca_model": "ConnectX-7"}) == {}


# --- NCCL with the SHARP plugin; Slurm for cgroup v2 --------------------------------------


def test_an_exporter_runs_with_the_dcgm_major_its_tag_names() -> None:
    # Tags from NVIDIA's releases: 4.2.3-4.1.3 (gpu-operator#1475), 4.1.1-4.0.4 (#1306).
    assert "dcgm-exporter-built-for-dcgm" not in broken(
        {"dcgm_exporter": "4.2.3-4.1.3", "dcgm": "4.2.3"}
    )
    assert "dcgm-exporter-built-for-dcgm" not in broken(
        {"dcgm_exporter": "4.1.1-4.0.4", "dcgm": "4.2.3"}
    )
    assert "dcgm-exporter-built-for-dcgm" in broken(
        {"dcgm_exporter": "4.2.3-4.1.3", "dcgm": "3.3.9"}
    )


def test_dcgm_needs_r450_and_cuda_13_needs_r580() -> None:
    assert "dcgm-min-driver" not in broken({"dcgm": "4.2.3", "nvidia_driver": "450.51.06"})
    assert "cuda-13-0-min-driver" not in broken({"cuda": "13.0", "nvidia_driver": "580.65.06"})
    assert "cuda-13-0-min-driver" in broken({"cuda": "13.0", "nvidia_driver": "570.172.08"})


def test_sharp_plugin_needs_nccl_2_7_3() -> None:
    # SHARP 3.9.1 LTS, "Using NVIDIA SHARP with NVIDIA NCCL": NCCL version 2.7.3 or higher.
    assert broken({"sharp_plugin": "3.9.0", "nccl": "2.7.2-1+cuda11.0"}) == {
        "sharp-plugin-min-nccl": "nccl"
    }
    assert broken({"sharp_plugin": "3.9.0", "nccl": "2.21.5-1+cuda12.4"}) == {}
    # Without the plugin the rule does not apply.
    assert broken({"nccl": "2.7.2-1+cuda11.0"}) == {}


def test_slurm_below_22_05_is_refused_for_cgroup_v2() -> None:
    assert broken({"slurm": "21.08.8"}) == {"slurm-cgroup-v2": "slurm"}
    assert broken({"slurm": "22.05.8"}) == {}
    assert broken({"slurm": "24.05.5"}) == {}


@pytest.mark.parametrize(
    ("branch", "driver"),
    [("535", "535.183.01"), ("550", "550.127.08"), ("560", "560.35.03"), ("570", "570.172.08")],
)
def test_each_driver_branch_with_its_fabric_manager(branch: str, driver: str) -> None:
    known = {"nvidia_driver_branch": branch, "nvidia_driver": driver, "fabricmanager": driver}
    assert broken(known) == {}
    # One patch behind the driver: the fabric manager refuses to start.
    major, minor, patch = driver.split(".")
    behind = f"{major}.{minor}.{int(patch) - 1:02d}"
    assert broken({**known, "fabricmanager": behind}) == {
        "fabricmanager-equals-driver": "fabricmanager"
    }
    # Another branch's fabric manager is just as wrong.
    assert "fabricmanager-equals-driver" in broken({**known, "fabricmanager": "525.147.05"})


# --- every rule: one set of versions that breaks it, and the shipped examples keep it ----------

BREAKS: dict[str, dict[str, str]] = {
    "driver-branch": {"nvidia_driver_branch": "550", "nvidia_driver": "535.183.01"},
    "fabricmanager-equals-driver": {"fabricmanager": "550.127.05", "nvidia_driver": "550.127.08"},
    "cuda-12-0-min-driver": {"cuda": "12.0", "nvidia_driver": "525.60.12"},
    "cuda-12-1-min-driver": {"cuda": "12.1", "nvidia_driver": "530.30.01"},
    "cuda-12-2-min-driver": {"cuda": "12.2", "nvidia_driver": "535.54.02"},
    "cuda-12-3-min-driver": {"cuda": "12.3", "nvidia_driver": "545.23.05"},
    "cuda-12-4-min-driver": {"cuda": "12.4", "nvidia_driver": "550.54.13"},
    "cuda-12-5-min-driver": {"cuda": "12.5", "nvidia_driver": "555.42.01"},
    "cuda-12-6-min-driver": {"cuda": "12.6", "nvidia_driver": "560.28.02"},
    "cuda-12-8-min-driver": {"cuda": "12.8", "nvidia_driver": "570.25"},
    "cuda-12-9-min-driver": {"cuda": "12.9", "nvidia_driver": "575.51.02"},
    # CUDA 13.0's release notes: 580.65.06 or newer.
    "cuda-13-0-min-driver": {"cuda": "13.0", "nvidia_driver": "580.65.05"},
    # DCGM's install page: driver R450 and later.
    "dcgm-min-driver": {"dcgm": "4.2.3", "nvidia_driver": "440.118.02"},
    # The DCGM 3 exporter NVIDIA shipped with DCGM 3.3.8 (dcgm-exporter#390) beside DCGM 4.
    "dcgm-exporter-built-for-dcgm": {"dcgm_exporter": "3.3.8-3.6.0", "dcgm": "4.2.3"},
    "dmabuf-open-modules": {"gpudirect_mode": "dmabuf", "nvidia_open_modules": "false"},
    "dmabuf-min-driver": {"gpudirect_mode": "dmabuf", "nvidia_driver": "510.108.03"},
    "dmabuf-min-cuda": {"gpudirect_mode": "dmabuf", "cuda": "11.6"},
    "dmabuf-min-kernel": {"gpudirect_mode": "dmabuf", "kernel": "5.10.0-30-amd64"},
    "doca-2-9-no-connectx-8": {"doca": "2.9.2", "hca_model": "ConnectX-8"},
    "doca-2-9-connectx-7-firmware": {
        "doca": "2.9.1",
        "hca_model": "ConnectX-7",
        "hca_firmware": "28.41.1000",
    },
    "doca-2-10-connectx-7-firmware": {
        "doca": "2.10.0",
        "hca_model": "ConnectX-7",
        "hca_firmware": "28.43.2566",
    },
    "doca-3-0-connectx-7-firmware": {
        "doca": "3.0.0",
        "hca_model": "ConnectX-7",
        "hca_firmware": "28.44.1036",
    },
    "doca-3-1-connectx-7-firmware": {
        "doca": "3.1.0",
        "hca_model": "ConnectX-7",
        "hca_firmware": "28.44.1036",
    },
    "doca-3-2-connectx-7-firmware": {
        "doca": "3.2.2",
        "hca_model": "ConnectX-7",
        "hca_firmware": "28.46.1006",
    },
    "sharp-plugin-min-nccl": {"sharp_plugin": "3.9.0", "nccl": "2.7.2-1+cuda11.0"},
    "pyxis-built-for-slurm": {"pyxis_slurm": "23.11.10", "slurm": "24.05.5"},
    "slurm-cgroup-v2": {"slurm": "21.08.8"},
}


def test_every_rule_has_a_case_that_breaks_it() -> None:
    assert sorted(BREAKS) == sorted(rule.id for rule in MATRIX.rules)


@pytest.mark.parametrize("rule_id", sorted(BREAKS))
def test_each_rule_fires_on_versions_that_break_it(rule_id: str) -> None:
    assert rule_id in broken(BREAKS[rule_id])


EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.yml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("rule_id", sorted(BREAKS))
def test_no_rule_fires_on_the_examples_pins_with_a_node_that_runs_them(
    path: Path, rule_id: str
) -> None:
    """The example's pins, with a node that runs exactly them (fabric manager = driver, pyxis
    built for the pinned Slurm, ConnectX-7 on the firmware its DOCA bundles, a 6.8 kernel):
    only what the breaking case changes makes the rule fire."""
    from cluster_tool.spec import load_spec
    from cluster_tool.spec.pins import spec_pins

    cluster = load_spec(path)
    pins = {c: p.version for c, p in spec_pins(cluster).items()}
    assert pins["doca"].startswith("3.1"), "the node below runs DOCA 3.1's firmware line"
    # With the distribution's Slurm the spec pins none: the OS's own release runs (slurm-wlm
    # 23.11.4 in Ubuntu 24.04, packages.ubuntu.com/noble/slurm-wlm; 22.05.8 in Debian 12,
    # packages.debian.org/bookworm/slurm-wlm, which the lab's nodes run).
    if "slurm" not in pins:
        (os_name,) = {group.os for group in cluster.nodes}
        pins["slurm"] = {"ubuntu2404": "23.11.4", "debian12": "22.05.8", None: "22.05.8"}[os_name]
    node = {
        "fabricmanager": pins["nvidia_driver"],
        "pyxis_slurm": pins["slurm"],
        "kernel": "6.8.0-45-generic",
        "hca_model": "ConnectX-7",
        "hca_firmware": "28.46.1006",  # what DOCA 3.1.0 bundles (its General Support page)
    }
    assert broken({**pins, **node}) == {}
    changed = {**pins, **node, **BREAKS[rule_id]}
    assert rule_id in broken(changed)


# --- the data itself ---------------------------------------------------------------------

RULE = """
checked: 2026-12-01
components: {cuda: CUDA, nvidia_driver: driver}
rules:
  - id: r
    kind: range
    when: {cuda: "12.4"}
    component: nvidia_driver
    min: "550.54.14"
    why: w
    source: https://example.org/notes
    checked: 2026-12-01
"""


def test_a_well_formed_rule_parses() -> None:
    assert [r.id for r in parse_matrix(RULE).rules] == ["r"]


@pytest.mark.parametrize(
    ("old", "new", "complaint"),
    [
        ("    source: https://example.org/notes\n", "", "source"),
        ("    source: https://example.org/notes", "    source: see the notes", "source"),
        ("component: nvidia_driver", "component: nvidia_drivr", "nvidia_drivr"),
        ('    min: "550.54.14"\n', "", "min"),
        ("kind: range", "kind: between", "kind"),
    ],
)
def test_a_rule_without_its_source_or_with_a_typo_is_refused(
    old: str, new: str, complaint: str
) -> None:
    assert old in RULE
    with pytest.raises(MatrixError, match=complaint):
        parse_matrix(RULE.replace(old, new))


def test_rule_ids_are_unique() -> None:
    rules = RULE.split("rules:\n")[1]
    with pytest.raises(MatrixError, match="used twice"):
        parse_matrix(RULE + rules)


def test_docs_list_every_rule_with_its_source() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "compat.md").read_text()
    rows = {line.split("`")[1]: line for line in doc.splitlines() if line.startswith("| `")}
    for rule in MATRIX.rules:
        assert rule.id in rows, f"docs/compat.md has no row for {rule.id}"
    for rule in MATRIX.rules:
        assert rule.source in doc, f"docs/compat.md does not cite {rule.source} ({rule.id})"
