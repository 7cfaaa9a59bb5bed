"""nccl-tests output: the real H100 runs (2-node NDR, single-node NVLS, 96-rank excerpt) and
every variant the gate meets: failures, runs that died, old and extended headers."""

from __future__ import annotations

import json

import pytest

from cluster_tool.errors import ParseError
from cluster_tool.parsers import to_jsonable
from cluster_tool.parsers.nccl_tests import busbw_factor, parse_nccl_tests
from tests.conftest import FIXTURES, read_real_output

NCCL = FIXTURES / "parsers" / "nccl"

TWO_NODE_BUSBW = [
    0.00, 0.00, 0.00, 0.00, 0.01, 0.01, 0.03, 0.06, 0.14, 0.25, 0.48, 0.94, 1.80, 3.63, 6.34,
    10.10, 12.65, 27.33, 51.58, 83.33, 118.57, 169.67, 234.81, 269.98, 336.29, 392.35, 426.97,
    448.90, 461.24, 466.52, 468.46, 469.21,
]  # fmt: skip


def test_two_node_16_rank_ndr_run() -> None:
    run = parse_nccl_tests(read_real_output("all_reduce_perf_h100_2node_16gpu_ib_ndr_xe9680.txt"))
    assert run.complete and run.errors == ()
    assert run.avg_busbw == 139.56 and run.out_of_bounds == 0
    assert run.collective == "all_reduce" and run.nccl_version == "2.26.2+cuda12.8"
    assert len(run.ranks) == 16 and run.rank_count == 16
    assert {r.host for r in run.ranks} == {"bm-h100-01", "bm-h100-02"}
    r9 = run.ranks[9]
    assert (r9.rank, r9.group, r9.pid, r9.host, r9.device, r9.bus_id, r9.gpu) == (
        9, 0, 26634, "bm-h100-02", 1, "0000:3b:00", "NVIDIA H100 80GB HBM3",
    )  # fmt: skip
    assert [r.out_of_place.busbw for r in run.rows if r.out_of_place] == TWO_NODE_BUSBW
    last = run.rows[-1]
    assert (last.size, last.count, last.type, last.redop, last.root) == (
        17179869184, 4294967296, "float", "sum", -1,
    )  # fmt: skip
    assert last.out_of_place is not None and last.in_place is not None
    assert (last.out_of_place.time_us, last.out_of_place.algbw, last.out_of_place.wrong) == (
        68652.0, 250.24, 0,
    )  # fmt: skip
    assert (last.in_place.time_us, last.in_place.busbw) == (68668.0, 469.10)
    assert run.max_busbw == 469.21 and run.wrong_total == 0
    assert run.header is not None and run.header.max_bytes == 17179869184
    assert (run.header.warmup_iters, run.header.iters, run.header.agg_iters) == (5, 20, 1)
    # busbw/algbw is 2(n-1)/n for 16 ranks.
    assert (
        abs(last.out_of_place.busbw / last.out_of_place.algbw - busbw_factor("all_reduce", 16))
        < 0.01
    )


def test_single_node_nvls_variant_header() -> None:
    run = parse_nccl_tests(
        read_real_output("all_reduce_perf_h100_single_node_8gpu_nvls_nvidia_dgxc.txt")
    )
    header = run.header
    assert header is not None
    assert (header.threads, header.gpus_per_thread, header.min_bytes, header.max_bytes) == (
        1, 1, 8, 17179869184,
    )  # fmt: skip
    assert (header.step, header.validation, header.graph) == ("2(factor)", 1, 0)
    assert header.extra == (("side_work", "0"), ("work_sms", "0"), ("direction", "H2D"))
    assert run.avg_busbw == 159.151 and run.complete and run.nccl_version is None
    assert len(run.ranks) == 8 and {r.host for r in run.ranks} == {"pool0-01806"}
    assert [r.device for r in run.ranks] == list(range(8))
    assert run.ranks[7].bus_id == "0000:e4:00"
    assert len(run.rows) == 32 and run.max_busbw == 480.16
    assert run.rows[-1].in_place is not None and run.rows[-1].in_place.busbw == 479.99


def test_coreweave_96_rank_excerpt() -> None:
    run = parse_nccl_tests(
        read_real_output("all_reduce_perf_h100_96gpu_claimed64_sharp_coreweave_readme_excerpt.txt")
    )
    assert run.ranks == ()  # the README elides the device list
    assert run.inferred_rank_count() == 96  # busbw/algbw = 2(n-1)/n = 1.979
    assert run.rank_count == 96  # and in the JSON
    assert run.avg_busbw == 373.187 and run.complete and run.out_of_bounds == 0
    assert [r.size for r in run.rows] == [2**29, 2**30, 2**31, 2**32, 2**33]
    assert [r.out_of_place.busbw for r in run.rows if r.out_of_place] == [
        356.01, 365.90, 380.73, 383.23, 386.56,
    ]  # fmt: skip
    assert run.header is not None and run.header.agg_iters is None and run.header.iters == 50


def test_nccl_failure_after_three_sizes_is_data() -> None:
    run = parse_nccl_tests((NCCL / "all_reduce_nccl_failure_reducing_maxbytes.txt").read_text())
    assert not run.complete and run.avg_busbw is None and run.out_of_bounds is None
    assert run.reduced_max_bytes == 27951912277
    assert len(run.rows) == 3 and run.collective == "all_reduce"
    assert len(run.errors) == 4
    assert run.errors[0].startswith("HCA-128: Test NCCL failure common.cu:1204")
    assert run.errors[1] == ".. HCA-128 pid 757466: Test failure common.cu:915"
    assert {r.host for r in run.ranks} == {"HCA-128", "HCA-108"}


def test_run_that_died_inside_a_row() -> None:
    run = parse_nccl_tests((NCCL / "all_reduce_died_mid_row.txt").read_text())
    assert not run.complete and run.avg_busbw is None
    assert [r.size for r in run.rows] == [8, 16, 32, 64]  # NCCL INFO lines in between skipped
    assert run.errors == (
        "output ends inside a row (line 21): 128            32     float     sum      -1    31.5",
    )
    assert run.nccl_version == "2.21.5+cuda12.4"
    assert run.collective == "all_reduce"  # count = size / 4 bytes per float


def test_cuda_failure_before_any_table() -> None:
    run = parse_nccl_tests((NCCL / "all_reduce_cuda_failure_before_table.txt").read_text())
    assert run.rows == () and not run.complete
    assert run.errors == (
        "gpu003: Test CUDA failure common.cu:892 'out of memory'",
        ".. gpu003 pid 5092: Test failure common.cu:844",
    )
    assert len(run.ranks) == 2 and run.header is not None and run.header.gpus_per_thread == 8


def test_validation_off_wrong_is_na_and_collective_from_binary_name() -> None:
    run = parse_nccl_tests((NCCL / "all_gather_validation_off_na.txt").read_text())
    assert run.collective == "all_gather"
    assert all(r.out_of_place and r.out_of_place.wrong is None for r in run.rows)
    assert all(r.in_place and r.in_place.wrong is None for r in run.rows)
    assert run.rows[0].size == 0 and run.rows[-1].redop == "none"
    assert run.avg_busbw == 147.332 and run.complete
    assert run.header is not None and run.header.validation == 0
    assert run.inferred_rank_count() == 4


def test_old_layout_without_root_and_with_error_column() -> None:
    run = parse_nccl_tests((NCCL / "all_reduce_old_no_root_error_column.txt").read_text())
    assert (
        run.header is not None and run.header.agg_iters is None and run.header.gpus_per_thread == 4
    )
    assert [(r.rank, r.group, r.pid, r.host) for r in run.ranks][:1] == [(0, None, 1688, "node03")]
    row = run.rows[-1]
    assert row.root is None and row.redop == "sum"
    assert row.out_of_place is not None and row.out_of_place.wrong is None
    assert row.out_of_place.error == 4e-07 and row.out_of_place.busbw == 117.58
    assert run.collective == "all_reduce" and run.avg_busbw == 35.8867


def test_rooted_extra_column_out_of_place_only_validation_failed() -> None:
    run = parse_nccl_tests((NCCL / "reduce_rooted_out_of_place_only_wrong.txt").read_text())
    assert run.collective == "reduce"
    assert all(r.root == 0 and r.in_place is None for r in run.rows)
    bad = run.rows[2]
    assert bad.out_of_place is not None
    # `avgtime` sits before `time`: columns are mapped by their header names.
    assert (bad.out_of_place.time_us, bad.out_of_place.busbw, bad.out_of_place.wrong) == (
        120.9, 138.77, 12,
    )  # fmt: skip
    assert run.out_of_bounds == 12 and run.wrong_total == 12 and run.complete


def test_one_single_rank_run_per_process_is_reported() -> None:
    # srun without --mpi=pmix: every process runs alone and prints its own header and table.
    one = "\n".join(
        [
            "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20"
            " agg iters: 1 validation: 1 graph: 0",
            "#  Rank  0 Group  0 Pid 11 on gpu001 device  0 [0x19] NVIDIA H100 80GB HBM3",
            "#       size         count      type   redop    root     time   algbw   busbw #wrong"
            "     time   algbw   busbw #wrong",
            "           8             2     float     sum      -1     5.63    0.00    0.00      0"
            "     0.20    0.04    0.00      0",
            "# Out of bounds values : 0 OK",
            "# Avg bus bandwidth    : 0",
        ]
    )
    run = parse_nccl_tests(one + "\n" + one.replace("device  0", "device  1") + "\n")
    assert len(run.errors) == 1 and "second nccl-tests header" in run.errors[0]
    assert run.errors[0].startswith("line 7:")
    assert [r.device for r in run.ranks] == [0, 1] and run.complete


def test_json_has_the_agreed_fields() -> None:
    run = parse_nccl_tests(read_real_output("all_reduce_perf_h100_2node_16gpu_ib_ndr_xe9680.txt"))
    data = json.loads(json.dumps(to_jsonable(run)))
    for key in ("collective", "ranks", "rows", "avg_busbw", "complete", "errors", "out_of_bounds"):
        assert key in data
    row = data["rows"][0]
    assert set(row) >= {"size", "count", "type", "redop", "root", "out_of_place", "in_place"}
    assert set(row["out_of_place"]) >= {"time_us", "algbw", "busbw", "wrong"}
    assert data["ranks"][0]["host"] == "bm-h100-01" and data["rank_count"] == 16


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("", None),
        ("hello\nworld\n", None),
        (
            "#  size count type redop root time algbw busbw #wrong\n"
            "  8  2  float  sum  -1  1.0  0.0  0.0  0  extra\n",
            2,
        ),
        (
            "#  size count type redop root time algbw busbw #wrong\n"
            "  8  2  float  sum  -1  fast  0.0  0.0  0\n",
            2,
        ),
        ("#  size count type redop root busbw\n", 1),
        (
            "#  size count type redop root time algbw busbw #wrong\n"
            "  8  2  float  sum\n  16  4  float  sum  -1  1.0  0.0  0.0  0\n",
            2,
        ),
    ],
)
def test_text_that_is_not_nccl_tests_raises(text: str, where: int | None) -> None:
    with pytest.raises(ParseError) as err:
        parse_nccl_tests(text)
    assert err.value.line_no == where


def test_a_million_wrong_elements_printed_with_g_are_still_a_count() -> None:
    # common.cu prints #wrong with %5g: 2^20 wrong elements read "1.04858e+06". Built from the
    # real two-node capture, with one row's counts replaced so.
    text = read_real_output("all_reduce_perf_h100_2node_16gpu_ib_ndr_xe9680.txt")
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["17179869184"])
    fields = lines[at].split()
    fields[8] = fields[12] = "1.04858e+06"  # out-of-place and in-place #wrong
    lines[at] = "  ".join(fields)
    run = parse_nccl_tests("\n".join(lines) + "\n")
    last = run.rows[-1]
    assert last.out_of_place is not None and last.out_of_place.wrong == 1048580
    assert run.wrong_total >= 2 * 1048580
