"""Issue 17: real captures, and real captures as operators collect them (a prompt line,
pdsh/clush `host: ` prefixes, Open MPI tags, colour codes, CRLF, a trailing tool error).
Every figure asserted here was read by hand from the capture, not from the parser."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cluster_tool.cli import main
from cluster_tool.parsers import ParseError, read
from cluster_tool.parsers.dcgmi import parse_dcgmi_diag
from cluster_tool.parsers.ibnetdiscover import parse_ibnetdiscover
from cluster_tool.parsers.ibstat import parse_ibstat
from cluster_tool.parsers.kernel_log import parse_xids
from cluster_tool.parsers.nccl_tests import parse_nccl_tests
from cluster_tool.parsers.nvidia_smi import parse_nvidia_smi_q
from cluster_tool.parsers.nvidia_topo import parse_topo_matrix
from tests.conftest import FIXTURES, REAL_OUTPUTS, read_real_output

CAPTURES = FIXTURES / "parsers" / "real"
XE9680 = "all_reduce_perf_h100_2node_16gpu_ib_ndr_xe9680.txt"
IBSTAT_H100 = "ibstat_h100_8xcx7_ndr_ib_all_active.txt"
DCGM_FAIL_ALL = "dcgmi_diag_dcgm3.3.8_h100x8_fail_all_prompt_line.txt"
H200_PERSISTENCE = "dcgmi_diag_dcgm3.1.8_h200x8_persistence_bare_fail_prompt_line.txt"
GH200_WRONG = "all_reduce_perf_gh200_16rank_nccl_tests_2.17.9_wrong_values.txt"


def capture(name: str) -> str:
    """A capture from tests/fixtures/parsers/real, without its `# source:` line."""
    first, _, rest = (CAPTURES / name).read_text(encoding="utf-8").partition("\n")
    # A public URL, or (as in shared/fixtures/real-outputs) UNRESOLVED URL and the index id.
    assert first.startswith(("# source: https://", "# source: UNRESOLVED URL - ")), name
    return rest


def pdsh(hosts: dict[str, str]) -> str:
    """What `pdsh -w` prints: every line of each host's output behind `host: `."""
    return "".join(f"{host}: {line}\n" for host, text in hosts.items() for line in text.split("\n"))


# --------------------------------------------------------------- class 1: dcgmi Fail - All


def test_dcgm_fail_all_after_a_prompt_line_fails_every_gpu() -> None:
    # nccl-tests#264: 8 H100s without fabric manager; GPU Memory "Fail - All", one warning
    # per GPU 0..7. The capture starts with the shell prompt and the command.
    diag = parse_dcgmi_diag(capture(DCGM_FAIL_ALL))
    assert diag.dcgm_version == "3.3.8" and diag.driver_version == "560.35.03"
    assert diag.verdict == "Fail"
    assert diag.failed_gpus == (0, 1, 2, 3, 4, 5, 6, 7)
    memory = diag.test("GPU Memory")
    assert memory.all_gpus and memory.gpus == {g: "Fail" for g in range(8)}
    assert [m.gpus for m in memory.messages] == [(g,) for g in range(8)]
    # Persistence Mode passed; its Info text, wrapped over 12 rows, names GPUs 0 to 4.
    persistence = diag.test("Persistence Mode")
    assert persistence.verdict == "Pass" and persistence.gpus == {}
    (info,) = persistence.messages
    assert info.kind == "Info" and info.gpu == 0 and info.gpus == (0, 1, 2, 3, 4)
    assert diag.test("EUD Test").verdict == "Skip"


def test_cli_dcgm_capture_with_prompt_line_exits_0_and_names_the_lines_set_aside(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["parse", "dcgmi-diag", str(CAPTURES / DCGM_FAIL_ALL), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["failed_gpus"] == [0, 1, 2, 3, 4, 5, 6, 7]
    # Line 1 is the fixture's source note, line 2 the operator's prompt: both set aside.
    assert ":1: note: 2 line(s) before the dcgmi-diag output not read" in err


# --------------------------------------------------- class 2: nvidia-smi -q, driver >= 565


def test_nvidia_smi_q_driver_565_module_id_under_platform_info_and_recovery_action() -> None:
    report = parse_nvidia_smi_q(capture("nvidia-smi-q_h100x8_driver565.57.01_platform_info.txt"))
    assert report.driver_version == "565.57.01" and report.attached_gpus == 8
    assert [g.pci_bus_id[9:11] for g in report.gpus if g.pci_bus_id] == [
        "18",
        "2A",
        "3A",
        "5D",
        "9A",
        "AB",
        "BA",
        "DB",
    ]
    # `Platform Info` / `Module Id` of each GPU, in printed order.
    assert [g.module_id for g in report.gpus] == [2, 4, 1, 3, 6, 8, 5, 7]
    assert [g.recovery_action for g in report.gpus] == ["None"] * 8
    assert report.gpus[0].pcie_replays == 7


def test_nvidia_smi_q_driver_535_keeps_its_top_level_module_id() -> None:
    # Before 565 `Module ID` was a top-level field, and there was no recovery action.
    report = parse_nvidia_smi_q(read_real_output("nvidia-smi-q_h100x8_driver535.161.08_full.txt"))
    assert all(g.recovery_action is None for g in report.gpus)
    assert sorted(g.module_id for g in report.gpus if g.module_id is not None) == list(range(1, 9))


# ----------------------------------------------------------- class 3: colour codes


def _coloured(text: str) -> str:
    """What `grep --color=always -e sum -e '#'` does to nccl-tests output."""
    return text.replace(" sum ", " \x1b[01;31m\x1b[Ksum\x1b[m\x1b[K ").replace(
        "#", "\x1b[01;31m\x1b[K#\x1b[m\x1b[K"
    )


def test_nccl_tests_with_colour_codes_keeps_every_row_rank_and_the_average() -> None:
    run = parse_nccl_tests(_coloured(read_real_output(XE9680)))
    assert len(run.rows) == 32 and len(run.ranks) == 16
    assert run.header is not None and run.avg_busbw == 139.56 and run.complete
    assert run.rows[0].size == 8 and run.rows[-1].size == 17179869184
    last = run.rows[-1].out_of_place
    assert last is not None and last.busbw == 469.21


def test_nccl_tests_row_the_parser_cannot_place_is_an_error_with_its_line_not_a_drop(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lines = read_real_output(XE9680).split("\n")
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("1048576 "))
    # A row whose count column is mangled (a terminal that wrapped, a stray byte).
    lines[at] = lines[at].replace("262144", "262144?", 1)
    with pytest.raises(ParseError) as raised:
        parse_nccl_tests("\n".join(lines))
    assert raised.value.line_no == at + 1
    reading = read("nccl-tests", "\n".join(lines))
    (host,) = reading.hosts
    assert host.errors[0].line_no == at + 1
    # What came before the broken row is kept: the 17 rows from 8 B to 512 KiB.
    assert [r.size for r in host.records.rows] == [2**k for k in range(3, 20)]
    path = tmp_path / "run.txt"
    path.write_text("\n".join(lines))
    assert main(["parse", "nccl-tests", str(path), "--json"]) == 1
    assert f"run.txt:{at + 1}: " in capsys.readouterr().err


# -------------------------------------------------------- class 4: a first line not the tool's


@pytest.mark.parametrize(
    "banner",
    [
        "$ ibstat",
        "[root@gpu001 ~]# ibstat",
        "Executing in Pod mofed-ubuntu22.04-ds-x7d9k",
        'Defaulted container "mofed-container" out of: mofed-container, init (init)',
    ],
)
def test_ibstat_after_a_banner_reads_all_nine_adapters(banner: str) -> None:
    cas = parse_ibstat(banner + "\n" + read_real_output(IBSTAT_H100))
    # 8 ConnectX-7 (MT4129) on IB NDR and one BlueField-3 (MT41692) Ethernet bond.
    assert [ca.ca_type for ca in cas].count("MT4129") == 8 and len(cas) == 9


def test_nccl_tests_failure_after_a_prompt_line_is_reported_not_rejected() -> None:
    run = parse_nccl_tests(capture("all_reduce_perf_h100x8_cuda_not_initialized_prompt_line.txt"))
    assert run.rows == () and not run.complete
    assert run.errors == (
        "test: Test CUDA failure common.cu:941 'system not yet initialized'",
        ".. test pid 54340: Test failure common.cu:891",
    )


# ------------------------------------------------ class 5: pdsh/clush and Open MPI prefixes


def test_cli_xid_sweep_through_pdsh_names_the_host_of_every_event(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    dmesg = (FIXTURES / "parsers" / "nvidia" / "dmesg_xid79_sxid20034_hgx.txt").read_text()
    dmesg = dmesg.partition("\n")[2].rstrip("\n")
    quiet = "[    5.123456] nvidia: loading out-of-tree module taints kernel."
    path = tmp_path / "sweep.txt"
    path.write_text(pdsh({"gpu017": quiet, "gpu042": dmesg}))
    assert main(["parse", "xid", str(path), "--json"]) == 0
    events = json.loads(capsys.readouterr().out)
    # gpu042's log: one Xid 79 (fell off the bus) and eight SXid 20034 lines.
    assert [(e["host"], e["kind"], e["code"]) for e in events] == [("gpu042", "xid", 79)] + [
        ("gpu042", "sxid", 20034)
    ] * 8
    # Called directly, as the node checks do, the parser gives the same events.
    assert [e.host for e in parse_xids(path.read_text())] == ["gpu042"] * 9


def test_ibstat_of_two_hosts_through_clush_is_one_record_set_per_host(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = read_real_output(IBSTAT_H100).rstrip("\n")
    path = tmp_path / "ibstat.txt"
    path.write_text(pdsh({"gpu001": text, "gpu002": text}))
    assert main(["parse", "ibstat", str(path), "--json"]) == 0
    hosts = json.loads(capsys.readouterr().out)
    assert sorted(hosts) == ["gpu001", "gpu002"]
    assert [len(cas) for cas in hosts.values()] == [9, 9]
    with pytest.raises(ParseError, match="2 hosts in one capture"):
        parse_ibstat(path.read_text())


def test_nccl_tests_under_open_mpi_tag_output_reads_as_the_plain_run() -> None:
    text = read_real_output(XE9680)
    tagged = "".join(f"[1,0]<stdout>:{line}\n" for line in text.split("\n"))
    assert parse_nccl_tests(tagged) == parse_nccl_tests(text)
    # Open MPI 5 puts a space after the tag.
    spaced = "".join(f"[1,0]<stdout>: {line}\n" for line in text.split("\n"))
    assert parse_nccl_tests(spaced) == parse_nccl_tests(text)


def test_dcgm_capture_with_crlf_line_ends_reads_as_the_plain_one() -> None:
    text = capture(DCGM_FAIL_ALL)
    assert parse_dcgmi_diag(text.replace("\n", "\r\n")) == parse_dcgmi_diag(text)


# ----------------------------------------------------- class 6: a trailing tool error


def test_cli_ibstat_ending_in_ibpanic_keeps_every_adapter_before_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = read_real_output(IBSTAT_H100).rstrip("\n")
    panic = "ibpanic: [2849] main: stat of IB device 'mlx5_8' failed: No such file or directory"
    path = tmp_path / "ibstat.txt"
    path.write_text(text + "\n" + panic + "\n")
    assert main(["parse", "ibstat", str(path), "--json"]) == 1
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == 9
    panic_line = len(text.split("\n")) + 1
    assert f"ibstat.txt:{panic_line}: " in err and "ibpanic" in err
    with pytest.raises(ParseError) as raised:
        parse_ibstat(path.read_text())
    assert raised.value.line_no == panic_line


def test_input_that_is_not_the_tool_at_all_is_still_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = REAL_OUTPUTS / IBSTAT_H100
    assert main(["parse", "dcgmi-diag", str(path), "--json"]) == 2
    # stdout holds only the summary every --json exit prints (issue 33), no records.
    assert set(json.loads(capsys.readouterr().out)) == {"command", "status", "exit_code", "error"}


# ------------------------------------------------------------- class 8: small ones


def test_nccl_tests_2_17_version_header_gives_the_library_version() -> None:
    run = parse_nccl_tests(capture(GH200_WRONG))
    assert run.tests_version == "2.17.9"
    # nccl-library=22902 is NCCL 2.29.2; no `NCCL version` line was printed.
    assert run.nccl_version == "2.29.2" and run.nccl_headers_version == "2.29.2"
    assert len(run.ranks) == 16 and {r.host for r in run.ranks} == {
        "gpu-1-43",
        "gpu-1-47",
        "gpu-1-49",
        "gpu-1-51",
    }
    assert {r.gpu for r in run.ranks} == {"NVIDIA GH200 120GB"}
    # 28 rows, 1 B to 128 MiB; the page stops before the footer.
    assert [r.size for r in run.rows] == [2**k for k in range(28)]
    assert not run.complete and run.avg_busbw is None
    # #wrong over both halves of the six corrupted rows (2 MiB .. 64 MiB).
    assert run.wrong_total == 2347545 + 1588400
    last = run.rows[-1].out_of_place
    assert last is not None and last.busbw == 89.85


# ------------------------------------------------ more real captures (issue 17 corpus)


def test_cli_real_ibstat_ending_in_ibpanic_keeps_all_eight_adapters(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # gpud: an A100 node's ibstat, mlx5_8 gone: eight CX-6 at HDR, then ibpanic (line 138).
    path = CAPTURES / "ibstat_a100_8xcx6_hdr_ends_in_ibpanic.txt"
    assert main(["parse", "ibstat", str(path), "--json"]) == 1
    out, err = capsys.readouterr()
    cas = json.loads(out)
    assert [ca["name"] for ca in cas] == [f"mlx5_{i}" for i in range(8)]
    assert {ca["ca_type"] for ca in cas} == {"MT4124"}
    assert ":138: " in err and "stat of IB device 'mlx5_8' failed" in err


def test_real_ibstat_of_twelve_roce_adapters_two_down() -> None:
    cas = parse_ibstat(capture("ibstat_h100_12xcx7_roce_two_down.txt"))
    # 8 ConnectX-7 (MT4129) and 4 ConnectX-6 Dx (MT4125), every port Ethernet.
    types = [ca.ca_type for ca in cas]
    assert len(cas) == 12 and types.count("MT4129") == 8 and types.count("MT4125") == 4
    down = sorted(ca.name for ca in cas for p in ca.ports if p.state == "Down")
    assert down == ["mlx5_11", "mlx5_5"]
    assert {p.link_layer for ca in cas for p in ca.ports} == {"Ethernet"}


def test_nvidia_smi_q_driver_535_183_module_ids_by_bus() -> None:
    report = parse_nvidia_smi_q(capture("nvidia-smi-q_h100x8_driver535.183.01_module_id.txt"))
    assert report.driver_version == "535.183.01"
    by_bus = {g.pci_bus_id[9:11]: g.module_id for g in report.gpus if g.pci_bus_id}
    assert by_bus == {"53": 7, "64": 5, "75": 6, "86": 8, "97": 1, "A8": 3, "B9": 4, "CA": 2}
    assert all(g.recovery_action is None for g in report.gpus)


def test_real_dmesg_T_with_five_gsp_timeouts() -> None:
    events = parse_xids(capture("dmesg_T_xid119_gsp_timeout.txt"))
    assert [(e.code, e.pci_bus_id) for e in events] == [(119, "0000:9b:00")] * 5
    assert [e.process_name for e in events] == [
        "nvidia-smi",
        "nvidia-smi",
        "nvidia-smi",
        "cache_mgr_main",
        "gpud",
    ]
    assert events[0].timestamp == "Sun Feb 23 16:24:18 2025"


def test_real_dmesg_decode_iso_xid_storm_through_pdsh(tmp_path: Path) -> None:
    text = capture("dmesg_decode_iso_xid13_xid43.txt").rstrip("\n")
    events = parse_xids(text)
    # 629 Xid 13 and 7 Xid 43, all on 0000:38:00.
    assert [e.code for e in events].count(13) == 629
    assert [e.code for e in events].count(43) == 7
    swept = parse_xids(pdsh({"gpu117": text}))
    assert len(swept) == 636 and {e.host for e in swept} == {"gpu117"}


TOPOGRAPH = "ibnetdiscover_quantum2_mqm9701_ndr_dgx_h100_topograph.txt"


def test_real_quantum2_ibnetdiscover_every_hca_uplink() -> None:
    fabric = parse_ibnetdiscover(capture(TOPOGRAPH))
    switches = [n for n in fabric.nodes if n.kind == "switch"]
    cas = [n for n in fabric.nodes if n.kind == "ca"]
    # 40 MQM9701 switches, 582 CAs of which 40 are the switches' SHARP Aggregation Nodes.
    assert len(switches) == 40 and len(cas) == 582
    assert sum(c.description == "Mellanox Technologies Aggregation Node" for c in cas) == 40
    (uplink,) = [u for u in fabric.ca_uplinks() if u.ca_description == "a08-p1-dgx-04-c01 mlx5_5"]
    assert uplink.switch_description == "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1"
    assert (uplink.switch_port, uplink.width, uplink.speed) == (1, 4, "NDR")
    assert uplink.ca_port_guid == "0xe09d7303007a4bd8"


def test_ibdiagnet_port_labels_are_labels_not_guids() -> None:
    # ibdiagnet2.ibnetdiscover prints a port's label where ibnetdiscover prints its GUID:
    # `[1](1)`, `[1](B9D0F0/0/0/1)`. Applied to the real Quantum-2 capture's adapter ports.
    text = capture(TOPOGRAPH)
    labelled = re.sub(r"^\[1\]\([0-9a-f]+\) ", "[1](1) ", text, flags=re.M)
    labelled = labelled.replace(
        '[1](1) \t"S-2c5eab0300b87b40"[1]\t', '[1](B9D0F0/0/0/1) \t"S-2c5eab0300b87b40"[1]\t'
    )
    plain = parse_ibnetdiscover(text)
    fabric = parse_ibnetdiscover(labelled)
    assert len(fabric.ca_uplinks()) == len(plain.ca_uplinks()) == 582
    ca = next(n for n in fabric.nodes if n.description == "a08-p1-dgx-04-c01 mlx5_5")
    (port,) = ca.ports
    assert port.port_label == "B9D0F0/0/0/1" and port.port_guid is None
    others = [n.ports[0] for n in fabric.nodes if n.kind == "ca" and n is not ca and n.ports]
    assert {p.port_label for p in others} == {"1"} and {p.port_guid for p in others} == {None}


TOPO_NV18 = "nvidia-smi_topo-m_nv18_12nic_tabs_numa_off.txt"


def test_cli_topo_matrix_without_its_nic_legend_keeps_the_matrix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The real NV18 capture cut before `NIC Legend:` (a pager quit, a scroll-back limit).
    text = read_real_output(TOPO_NV18)
    cut = text[: text.index("NIC Legend:")]
    path = tmp_path / "topo.txt"
    path.write_text(cut)
    assert main(["parse", "nvidia-smi-topo", str(path), "--json"]) == 1
    out, err = capsys.readouterr()
    matrix = json.loads(out)
    assert matrix["columns"][:9] == [*(f"GPU{i}" for i in range(8)), "NIC0"]
    assert len(matrix["columns"]) == 20
    # GPU0 is PIX to NIC0 and NODE to NIC1, GPU1 the other way round; all GPUs NV18.
    assert matrix["links"]["GPU0"]["NIC0"] == "PIX" and matrix["links"]["GPU0"]["NIC1"] == "NODE"
    assert matrix["links"]["GPU1"]["NIC1"] == "PIX" and matrix["links"]["GPU3"]["GPU7"] == "NV18"
    assert {d["device"] for d in matrix["devices"] if d["kind"] == "nic"} == {None}
    assert "NIC0: <device>' in the NIC legend" in err
    with pytest.raises(ParseError):
        parse_topo_matrix(cut)


def test_h200_persistence_mode_bare_fail_names_every_gpu_its_text_names() -> None:
    # DCGM 3.1.8 on 8x H200: a bare `Fail` (no GPU list); the Error text, wrapped over 22
    # rows and cut off by DCGM, names GPUs 0 to 5. The capture starts with the prompt.
    diag = parse_dcgmi_diag(capture(H200_PERSISTENCE))
    assert diag.dcgm_version == "3.1.8" and diag.gpu_device_ids == ("2335",) * 8
    persistence = diag.test("Persistence Mode")
    assert persistence.verdict == "Fail" and not persistence.all_gpus
    (error,) = persistence.messages
    assert error.kind == "Error" and error.gpu == 0 and error.gpus == (0, 1, 2, 3, 4, 5)
    assert persistence.gpus == dict.fromkeys(range(6), "Fail")
    assert diag.failed_gpus == (0, 1, 2, 3, 4, 5)


def test_h200_all_reduce_after_the_mpirun_command_lines() -> None:
    run = parse_nccl_tests(capture("all_reduce_perf_h200x8_8GiB_mpirun_command_first.txt"))
    assert run.collective == "all_reduce" and run.nccl_version == "2.19.3+cuda12.2"
    assert len(run.ranks) == 8 and {r.gpu for r in run.ranks} == {"NVIDIA H200"}
    (row,) = run.rows
    assert row.size == 8589934592 and row.out_of_place is not None
    assert (row.out_of_place.algbw, row.out_of_place.busbw) == (272.55, 476.96)
    assert run.avg_busbw == 476.967 and run.complete and run.out_of_bounds == 0


def test_h800_alltoall_dying_mid_row_is_a_failure_not_a_row() -> None:
    # nccl-tests#355: the only row is cut by a CUDA failure on the same line; six more
    # failure lines follow. No row, no footer, every failure kept.
    run = parse_nccl_tests(capture("alltoall_perf_h800_16rank_nccl_tests_2.17.6_dies_mid_row.txt"))
    assert run.collective == "alltoall" and run.tests_version == "2.17.6"
    assert run.nccl_version == "2.28.7+cuda13.0" and run.nccl_headers_version == "2.28.7"
    assert len(run.ranks) == 16 and {r.host for r in run.ranks} == {"node0", "node1"}
    assert run.rows == () and not run.complete and len(run.errors) == 7
    assert "Test CUDA failure common.cu:389 'an illegal memory access" in run.errors[0]
    assert run.errors[-1] == ".. node0 pid 62767: Test failure common.cu:1368"


# ------------------------------------- more real captures: layouts not yet in the corpus


def test_real_dmesg_iso_double_bit_error_then_row_remap_and_contained_errors() -> None:
    # gpud: `dmesg --time-format iso`, the Xid lines among 30 nvidia-peermem errors: one
    # Xid 48 (DBE), one Xid 63 (row remapping) and nine Xid 94, all on 0000:19:00.
    events = parse_xids(capture("dmesg_iso_xid48_dbe_xid63_xid94.txt"))
    assert [e.code for e in events] == [48, 63] + [94] * 9
    assert {e.pci_bus_id for e in events} == {"0000:19:00"}
    assert events[0].timestamp == "2024-11-15T12:02:03,470068+00:00"
    assert [e.process_name for e in events[3:]] == ["python3.10"] * 8
    assert {e.pid for e in events[3:]} == {1248209}


def test_real_ibstat_of_twelve_roce_adapters_all_active() -> None:
    cas = parse_ibstat(capture("ibstat_h100_8xcx7_4xcx6dx_roce_all_active.txt"))
    assert [ca.name for ca in cas] == ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_11"] + [
        f"mlx5_{i}" for i in range(2, 10)
    ]
    cx6dx = sorted(ca.name for ca in cas if ca.ca_type == "MT4125")
    assert cx6dx == ["mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"]
    assert {(ca.ca_type, p.rate_gbps) for ca in cas for p in ca.ports} == {
        ("MT4129", 400),
        ("MT4125", 100),
    }
    assert {p.state for ca in cas for p in ca.ports} == {"Active"}


def test_real_nccl_tests_2_13_header_after_a_markdown_note_and_the_mpirun_command() -> None:
    # A GCP A3 Mega note: a heading and the quoted mpirun command, then all_reduce_perf over
    # 2 x 8 H100 with the 2.13-era header (Group column, no `# nccl-tests version` line).
    run = parse_nccl_tests(capture("all_reduce_perf_h100_a3mega_16rank_8GiB_markdown_note.txt"))
    assert run.tests_version is None and run.nccl_version is None
    assert run.header is not None and (run.header.agg_iters, run.header.graph) == (1, 0)
    assert len(run.ranks) == 16 and {r.host for r in run.ranks} == {
        "ztan-mig-235z",
        "ztan-mig-gq73",
    }
    assert {r.gpu for r in run.ranks} == {"NVIDIA H100 80GB HBM3"}
    assert [r.size for r in run.rows] == [2**k for k in range(3, 34)]
    last = run.rows[-1]
    assert last.out_of_place is not None and last.in_place is not None
    assert (last.out_of_place.busbw, last.in_place.busbw) == (338.82, 337.35)
    assert run.avg_busbw == 70.742 and run.out_of_bounds == 0 and run.complete


def test_cli_dcgm_4_diag_after_its_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    # NVIDIA/DCGM#124: DCGM 4.4.2 prints lower-case test names, a bare verdict and one
    # `GPU0: Pass` row per GPU; the posted block starts with the command.
    path = CAPTURES / "dcgmi_diag_dcgm4.4.2_r2_command_line_first.txt"
    assert main(["parse", "dcgmi-diag", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    diag = json.loads(out)
    assert (diag["dcgm_version"], diag["driver_version"]) == ("4.4.2", "580.105.08")
    assert [(t["name"], t["verdict"], t["gpus"]) for t in diag["tests"]] == [
        ("software", "Pass", {"0": "Pass"}),
        ("memory", "Pass", {"0": "Pass"}),
        ("pcie", "Pass", {"0": "Pass"}),
    ]
    assert diag["failed_gpus"] == []
    assert ":1: note: 2 line(s) before the dcgmi-diag output not read" in err


def test_real_dcgm_4_table_copied_from_its_header_row() -> None:
    # A GB10 note: `dcgmi diag -r 3` in a pod, pasted from the `| Diagnostic | Result |` row
    # down (no top border). Everything but software was skipped.
    diag = parse_dcgmi_diag(capture("dcgmi_diag_dcgm4.4.2_r3_gb10_all_skip_no_top_border.txt"))
    assert diag.dcgm_version == "4.4.2" and diag.gpu_device_ids == ("2e12",)
    assert [(t.name, t.verdict) for t in diag.tests] == [
        ("software", "Pass"),
        ("memory", "Skip"),
        ("diagnostic", "Skip"),
        ("nvbandwidth", "Skip"),
        ("pcie", "Skip"),
        ("memory_bandwidth", "Skip"),
        ("targeted_stress", "Skip"),
        ("targeted_power", "Skip"),
    ]
    assert diag.failed_gpus == ()


def test_real_topo_matrix_inside_a_slurm_job_with_empty_cpu_affinity() -> None:
    # Princeton's Della H100 node: in a job whose only CPU is 1, GPU0-3 (NUMA 0) print an
    # empty CPU Affinity cell and GPU4-7 print `1`.
    matrix = parse_topo_matrix(
        capture("nvidia-smi_topo-m_h100_6nic_della_empty_cpu_affinity_prompt_line.txt")
    )
    assert [matrix.nics_at(g, ("PIX",)) for g in range(8)] == [
        ["mlx5_0", "mlx5_1"],
        [],
        [],
        ["mlx5_2"],
        ["mlx5_3", "mlx5_4"],
        [],
        ["mlx5_5"],
        [],
    ]
    assert [g.cpus for g in matrix.gpus] == [()] * 4 + [(1,)] * 4
    assert [g.numa_nodes for g in matrix.gpus] == [(0,)] * 4 + [(1,)] * 4
    assert matrix.gpu_link(0, 7) == "NV18"


def test_real_topo_matrix_whose_paste_ran_cells_together_is_an_error_at_its_row() -> None:
    # nccl-tests#333: a B200 node's matrix posted with tabs lost between cells; GPU2's row
    # (line 5 after the prompt) reads `PXBNODE`. No matrix is better than a wrong one.
    text = capture("nvidia-smi_topo-m_b200_16nic_cells_run_together_prompt_line.txt")
    with pytest.raises(ParseError, match="PXBNODE") as raised:
        parse_topo_matrix(text)
    assert raised.value.line_no == 5


def test_real_ibnetdiscover_of_a_gb200_hca_that_sees_no_fabric() -> None:
    # topograph: run on dgx-gb200-n01-c1, whose HCA-1 is cabled to nothing: the header and
    # its own CA (a ConnectX-7, devid 0x1021), no port line, so no uplink.
    fabric = parse_ibnetdiscover(capture("ibnetdiscover_gb200_hca_alone_no_fabric.txt"))
    (ca,) = fabric.nodes
    assert (ca.kind, ca.description) == ("ca", "dgx-gb200-n01-c1 HCA-1")
    assert ca.device_id == 0x1021 and ca.ports == ()
    assert fabric.ca_uplinks() == [] and fabric.generated_on == "Fri Aug  8 06:33:24 2025"


def test_real_nvidia_smi_q_driver_550_on_two_h100_nvl() -> None:
    # thamada/nvidia-smi: 2x H100 NVL (PCIe), driver 550.54.14: a top-level `Module ID` (4 on
    # both cards of the pair), ECC split into SRAM Uncorrectable Parity / SEC-DED, no
    # `GPU Recovery Action` yet.
    report = parse_nvidia_smi_q(capture("nvidia-smi-q_h100nvl_x2_driver550.54.14.txt"))
    assert report.driver_version == "550.54.14" and report.attached_gpus == 2
    assert [(g.pci_bus_id, g.serial, g.module_id) for g in report.gpus] == [
        ("00000000:AD:00.0", "1650724004565", 4),
        ("00000000:AE:00.0", "1650924002357", 4),
    ]
    assert {g.product_name for g in report.gpus} == {"NVIDIA H100 NVL"}
    assert {(g.pcie_gen_current, g.pcie_width_current) for g in report.gpus} == {(5, 16)}
    assert {g.memory_total_mib for g in report.gpus} == {95830}
    assert {g.power_limit_w for g in report.gpus} == {310.0}
    assert all(g.recovery_action is None and g.reset_required is False for g in report.gpus)
    assert {(g.remapped_rows.uncorrectable, g.remapped_rows.bank_max) for g in report.gpus} == {
        (0, 3072)
    }


# ------------------------------------------- every line accounted for: parse --lines


def test_cli_lines_accounts_for_every_line_of_a_real_nccl_capture(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = CAPTURES / "all_reduce_perf_h100_a3mega_16rank_8GiB_markdown_note.txt"
    assert main(["parse", "nccl-tests", str(path), "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["parse", "nccl-tests", str(path), "--json", "--lines"]) == 0
    out = json.loads(capsys.readouterr().out)
    # Counted by hand over the 65 lines of the file. Consumed (51): the settings line (10),
    # 16 rank lines (13-28), the column header (31), 31 rows (33-63), the two footer lines
    # (64, 65). Noise (14): the source note (1), the markdown heading (2), 5 quoted mpirun
    # lines (4-8), 3 blank lines (3, 9; none other), the bare '#' lines (11, 29), `Using
    # devices` (12), the out-of-place/in-place title (30) and the unit row (32).
    assert out["lines"] == [{"host": None, "consumed": 51, "noise": 14, "unread": 0, "skipped": 0}]
    # The records are what --json alone prints.
    assert out["records"] == plain


def test_cli_lines_of_ibstat_ending_in_ibpanic(capsys: pytest.CaptureFixture[str]) -> None:
    path = CAPTURES / "ibstat_a100_8xcx6_hdr_ends_in_ibpanic.txt"
    assert main(["parse", "ibstat", str(path), "--json", "--lines"]) == 1
    counts = json.loads(capsys.readouterr().out)["lines"]
    # 139 lines: the source note set aside before `CA 'mlx5_0'`; eight adapters on lines
    # 2-137, no blank line among them; ibpanic (138) and the empty last line not read.
    assert counts == [{"host": None, "consumed": 136, "noise": 0, "unread": 2, "skipped": 1}]


def test_lines_of_a_kernel_log_count_the_lines_that_are_not_xids_as_noise() -> None:
    text = capture("dmesg_iso_xid48_dbe_xid63_xid94.txt")
    (host,) = read("xid", text).hosts
    # 41 lines: 11 Xid lines read, 30 nvidia-peermem lines skipped as noise.
    assert host.line_counts == {"consumed": 11, "noise": 30, "unread": 0, "skipped": 0}


def test_lines_of_a_pdsh_sweep_are_counted_per_host() -> None:
    dmesg = capture("dmesg_iso_xid48_dbe_xid63_xid94.txt").rstrip("\n")
    quiet = "[    5.123456] nvidia: loading out-of-tree module taints kernel."
    reading = read("xid", pdsh({"gpu017": quiet, "gpu042": dmesg}))
    assert {h.host: h.line_counts for h in reading.hosts} == {
        "gpu017": {"consumed": 0, "noise": 1, "unread": 0, "skipped": 0},
        "gpu042": {"consumed": 11, "noise": 30, "unread": 0, "skipped": 0},
    }


def test_lines_of_a_topo_matrix_count_its_legend_as_noise_once() -> None:
    text = CAPTURES / "nvidia-smi_topo-m_h100_6nic_della_empty_cpu_affinity_prompt_line.txt"
    (host,) = read("nvidia-smi-topo", text.read_text()).hosts
    # 36 lines: the source note and the prompt set aside (1, 2); the header, 14 rows and
    # the 6 NIC legend lines read (21); 4 blank lines, `Legend:`, `NIC Legend:` and the 7
    # lines saying what X, SYS, NODE, ... mean are noise (13).
    assert host.line_counts == {"consumed": 21, "noise": 13, "unread": 0, "skipped": 2}
