"""Folding many nodes' lines into one per thing said, as `clush -b` does, and a failing run's
error findings folded by id within a screen."""

from __future__ import annotations

from cluster_tool.findings import Finding
from cluster_tool.report.terminal import error_digest, fold


def _unreachable(node: str, address: str) -> Finding:
    # The os.unreachable finding's message as the fan-out writes it, with OpenSSH's own words.
    return Finding(
        check="os.unreachable",
        node=node,
        expected="reachable",
        observed="unreachable",
        message=f"{node}: unreachable: Connection to {address} port 22 timed out",
    )


def test_thirty_two_unreachable_nodes_are_one_line_naming_them_as_a_hostlist() -> None:
    findings = [_unreachable(f"gpu{i:03d}", f"10.10.1.{i}") for i in range(1, 33)]
    digest = error_digest(findings, max_lines=20)
    assert digest.lines == [
        "os.unreachable  gpu[001-032]: unreachable: Connection to (address) port 22 timed out"
    ]
    assert (digest.shown, digest.left_out) == (32, 0)


def test_one_node_keeps_its_own_words() -> None:
    (line,) = fold([("gpu007", "gpu007: unreachable: Connection to 10.10.1.7 port 22 timed out")])
    assert line.line() == "gpu007: unreachable: Connection to 10.10.1.7 port 22 timed out"


def test_lines_that_differ_are_kept_apart_in_the_order_first_said() -> None:
    folded = fold(
        [
            ("gpu002", "driver 570.172.08"),
            ("gpu001", "driver 570.172.08"),
            ("gpu003", "driver 570.124.06"),
            ("gpu004", "driver 570.172.08"),
        ]
    )
    assert [g.line() for g in folded] == [
        "gpu[001-002,004]: driver 570.172.08",
        "gpu003: driver 570.124.06",
    ]
    assert [g.count for g in folded] == [3, 1]


def test_a_node_named_inside_the_line_folds_with_its_peers() -> None:
    folded = fold(
        [
            (n, f"{n}: cable of {n} mlx5_3 on su1-leaf-r2 port 17")
            for n in ("gpu001", "gpu002", "gpu010")
        ]
    )
    assert [g.line() for g in folded] == [
        "gpu[001-002,010]: cable of (this node) mlx5_3 on su1-leaf-r2 port 17"
    ]


def test_a_screenful_at_most_and_how_many_more() -> None:
    findings = [
        Finding(check="gpu.xid", node=f"gpu{i:03d}", message=f"gpu{i:03d}: Xid {i}")
        for i in range(1, 41)
    ]
    digest = error_digest(findings, max_lines=10)
    assert len(digest.lines) == 9
    assert digest.lines[0] == "gpu.xid  gpu001: Xid 1"
    assert (digest.shown, digest.left_out) == (9, 31)


def test_warnings_are_not_the_reason_a_run_failed() -> None:
    warning = Finding(check="version.outlier", severity="warning", node="gpu001", message="x")
    assert error_digest([warning], max_lines=10).lines == []
