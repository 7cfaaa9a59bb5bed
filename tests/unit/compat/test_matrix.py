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
        assert rule.checked == date(2026, 12, 1), rule.id
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
    assert broken(known) == {"doca-2-9-2-connectx-7-firmware": "hca_firmware"}
    assert broken({**known, "hca_firmware": "28.43.2566"}) == {}
    assert broken({**known, "hca_model": "ConnectX-6"}) == {}


# --- excludes: DOCA 2.9 and its LTS updates do not support ConnectX-8 ------------------------


def test_excludes_connectx_8_on_doca_2_9() -> None:
    violations = evaluate(MATRIX, {"doca": "2.9.1", "hca_model": "ConnectX-8"})
    assert [v.rule.id for v in violations] == ["doca-2-9-no-connectx-8"]
    assert "doca 2.9.1 does not support hca_model ConnectX-8" in violations[0].message
    assert broken({"doca": "3.0.0", "hca_model": "ConnectX-8"}) == {}
    assert broken({"doca": "2.9.1", "hca_model": "ConnectX-7"}) == {}


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
