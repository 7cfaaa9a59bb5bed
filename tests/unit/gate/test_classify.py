"""NCCL/CUDA/PMIx error lines by kind and host, and GPUDirect RDMA use, on captured text."""

from __future__ import annotations

from pathlib import Path

from cluster_tool.gate.classify import classify_errors, error_findings, gdr_findings, gdr_use

CAPTURED = Path(__file__).parent / "captured"


def test_error_lines_are_classified_by_kind_with_their_host() -> None:
    errors = classify_errors((CAPTURED / "nccl_errors.txt").read_text())
    kinds = [(e.check, e.host) for e in errors]
    assert kinds == [
        ("nccl.ib", "gpu002"),
        ("nccl.ib", "gpu002"),
        ("nccl.ib", "gpu001"),
        ("nccl.oom", "gpu003"),
        ("nccl.cuda", "gpu003"),
        ("nccl.transport", "gpu004"),
        ("nccl.transport", "gpu004"),
        ("nccl.transport", "gpu001"),
        ("nccl.launch", None),
        ("nccl.abort", None),
    ]


def test_info_lines_and_aftermath_are_not_errors() -> None:
    text = (
        "gpu001:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>\n"
        "srun: error: gpu004: task 31: Exited with exit code 1\n"
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
    )
    assert classify_errors(text) == []


def test_findings_are_one_per_kind_and_host() -> None:
    errors = classify_errors((CAPTURED / "nccl_errors.txt").read_text())
    findings = error_findings(errors, ("gpu001", "gpu002", "gpu003", "gpu004"))
    ib_gpu002 = [f for f in findings if f.check == "nccl.ib" and f.node == "gpu002"]
    assert len(ib_gpu002) == 1 and "(2 lines)" in ib_gpu002[0].message
    assert {f.check for f in findings} == {
        "nccl.ib",
        "nccl.oom",
        "nccl.cuda",
        "nccl.transport",
        "nccl.launch",
        "nccl.abort",
    }


def test_host_outside_the_job_is_not_blamed() -> None:
    errors = classify_errors("gpu099:1:1 [0] NCCL WARN NET/IB : ibv_poll_cq error 5\n")
    (f,) = error_findings(errors, ("gpu001", "gpu002"))
    assert f.node is None and "gpu001,gpu002" in f.message


def test_gdr_missing_on_one_host_is_named_from_its_own_lines() -> None:
    use = gdr_use((CAPTURED / "nccl_info_no_gdr.txt").read_text())
    assert use["gpu001"].gdr_channels == 3 and not use["gpu001"].gdr_missing
    assert use["gpu002"].ib_channels == 4 and use["gpu002"].gdr_channels == 1
    (f,) = gdr_findings([(("gpu001", "gpu002"), use)])
    assert f.check == "gdr.not-used" and f.node == "gpu002"
    assert f.observed == "3 of 4 NET/IB channels without GDRDMA"


def test_gdr_host_is_found_across_jobs_when_lines_name_only_rank_0() -> None:
    # Logs that carry only rank 0's prefix blame gpu001 in the first job; its clean job
    # with gpu003 clears it, so the one host never seen in a clean job is named.
    plain = gdr_use("gpu001:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0\n")
    clean = gdr_use(
        "gpu001:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA\n"
    )
    jobs = [(("gpu001", "gpu002"), plain), (("gpu001", "gpu003"), clean)]
    (f,) = gdr_findings(jobs)
    assert f.node == "gpu002" and f.observed.startswith("every job it ran in")


def test_no_channel_lines_is_no_evidence() -> None:
    assert gdr_findings([(("gpu001", "gpu002"), {})]) == []


def test_socket_transport_counts_as_no_gdr() -> None:
    text = "gpu005:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0\n"
    (f,) = gdr_findings([(("gpu005", "gpu006"), gdr_use(text))])
    assert f.node == "gpu005" and "over sockets" in f.observed


def test_errors_blame_the_host_only_in_a_one_node_job() -> None:
    errors = classify_errors("gpu003:1:1 [1] NCCL WARN Cuda failure 'out of memory'\n")
    (alone,) = error_findings(errors, ("gpu003",))
    (paired,) = error_findings(errors, ("gpu003", "gpu007"))
    assert (alone.severity, paired.severity) == ("error", "info")
    assert alone.node == paired.node == "gpu003"
