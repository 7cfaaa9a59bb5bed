"""`cluster-tool adopt` as an operator runs it: the draft that `spec check`, `render` and
`fabric check` take as it is, and one line and exit 2 for what cannot be adopted."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from cluster_tool.cli import main
from tests.conftest import FIXTURES

# ibnetdiscover from the real tool against ibsim (tests/fixtures/parsers/ib/README.md): leaves
# su1-leaf-r0/r1, spine lab-spine-1, gpu001-004 with mlx5_0/mlx5_1 at HDR; gpu002 mlx5_0 at 2X,
# gpu004 mlx5_0 at 1X, gpu003 mlx5_1 at QDR, gpu004 mlx5_1 not cabled.
IBSIM = FIXTURES / "parsers" / "ib" / "ibnetdiscover_ibsim_hdr.txt"


def two_rail_profile(tmp: Path) -> Path:
    path = tmp / "profile.yml"
    body = {
        "extends": "hgx-h100-8x-ndr",
        "expected_speed": "HDR",
        "expected_rate_gbps": 200,
        "hcas": [
            {"device": "mlx5_0", "pci": "0000:1a:00.0", "gpu": 0, "rail": 0},
            {"device": "mlx5_1", "pci": "0000:3c:00.0", "gpu": 1, "rail": 1},
        ],
        "nics": [],
    }
    path.write_text(yaml.safe_dump({"lab-2rail": body}))
    return path


def test_adopt_then_spec_check_render_and_fabric_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    draft = tmp_path / "cluster.yml"
    args = ["adopt", str(IBSIM), "--profile", str(two_rail_profile(tmp_path)), "-o", str(draft)]
    assert main([*args, "--leaf-name-pattern", "su{su}-leaf-r{rail}"]) == 0
    out = capsys.readouterr().out
    assert "adopted 4 GPU nodes in 1 SUs, 2 leaves, 1 spines" in out
    assert "departure: gpu004 mlx5_1 is not cabled" in out
    assert oct(draft.stat().st_mode & 0o777) == "0o600"

    assert main(["spec", "check", str(draft)]) == 0
    capsys.readouterr()
    inventory = tmp_path / "inventory"
    assert main(["render", str(draft), "-o", str(inventory)]) == 0
    capsys.readouterr()
    cabling = (inventory / "cabling.csv").read_text().splitlines()
    assert "gpu001,mlx5_0,0,0,1,su1-leaf-r0,1" in cabling
    assert not any(line.startswith("gpu004,mlx5_1,") for line in cabling)

    code = main(
        [
            "fabric", "check", "--spec", str(draft), "--ibnetdiscover", str(IBSIM),
            "--cabling", str(inventory / "cabling.csv"),
            "--switch-links", str(inventory / "switch-links.csv"), "--json",
        ]
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    errors = {
        (f["check"], f["node"], f["component"])
        for f in report["findings"]
        if f["severity"] == "error"
    }
    # The wiring is as adopted; what fails is the degraded links the README names.
    assert errors == {
        ("fabric.width", "gpu002", "mlx5_0"),
        ("fabric.width", "gpu004", "mlx5_0"),
        ("fabric.speed", "gpu003", "mlx5_1"),
    }
    assert code == 1
    warnings = {(f["check"], f["node"]) for f in report["findings"] if f["severity"] == "warning"}
    assert ("fabric.departure", "gpu004") in warnings


def one_line_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert "\x1b" not in err
    return err


def test_not_ibnetdiscover_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cluster.yml"
    smi = FIXTURES / "parsers" / "ib" / "README.md"
    err = one_line_exit_2(["adopt", str(smi), "-p", "hgx-h100-8x-ndr", "-o", str(out)], capsys)
    assert "ibnetdiscover" in err
    assert not out.exists()


def test_ten_megabytes_of_garbage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(31)
    garbage = tmp_path / "garbage.txt"
    garbage.write_bytes(bytes(rng.randrange(256) for _ in range(10 * 1024 * 1024)))
    out = tmp_path / "cluster.yml"
    err = one_line_exit_2(["adopt", str(garbage), "-p", "hgx-h100-8x-ndr", "-o", str(out)], capsys)
    assert f"{garbage}: not ibnetdiscover text" in err
    text = tmp_path / "text.txt"
    words = ["Switch", "Ca", '"S-1"', "[1]", "#", "lid", "vendid=0x2c9", "\n"]
    text.write_text(" ".join(rng.choice(words) for _ in range(2_000_000)))
    err = one_line_exit_2(["adopt", str(text), "-p", "hgx-h100-8x-ndr", "-o", str(out)], capsys)
    assert f"{text}: not ibnetdiscover text" in err
    assert not out.exists()


def test_control_characters_in_fabric_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = IBSIM.read_text()
    out = tmp_path / "cluster.yml"
    profile = str(two_rail_profile(tmp_path))
    # A switch whose name holds control characters (a colour code alone is taken off by the
    # capture normaliser, as pdsh and terminals add them): no switch name to adopt it by.
    bad = tmp_path / "switch.txt"
    bad.write_text(text.replace("MF0;lab-spine-1:", "MF0;lab\x01\u202espine:"))
    err = one_line_exit_2(["adopt", str(bad), "-p", profile, "-o", str(out)], capsys)
    assert "lab\\x01\\u202espine" in err
    assert "\x01" not in err and "\u202e" not in err
    assert not out.exists()
    # A CA whose description holds control characters: left out, shown escaped, never raw.
    ca = tmp_path / "ca.txt"
    ca.write_text(text.replace('"gpu003 mlx5_1"', '"gpu003\x01\u202e mlx5_1"'))
    assert main(["adopt", str(ca), "-p", profile, "-o", str(out)]) == 0
    shown = capsys.readouterr().out
    draft = out.read_text()
    for raw in ("\x01", "\u202e"):
        assert raw not in draft and raw not in shown
    assert "# Left out (1)" in draft
    assert "'gpu003\\x01\\u202e mlx5_1': not a `host device` node description" in draft
    assert main(["spec", "check", str(out)]) == 0


def test_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cluster.yml"
    out.write_text("mine\n")
    err = one_line_exit_2(["adopt", str(IBSIM), "-p", "hgx-h100-8x-ndr", "-o", str(out)], capsys)
    assert f"{out}: exists; use --force to overwrite" in err
    assert out.read_text() == "mine\n"
