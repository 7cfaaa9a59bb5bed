"""Admission's verdicts at fleet scale (issue 35): the same verdicts as the rule in its plainest
words, whatever the jobs, findings and trust; a node of a big full job that has no proven partner
gets a reason a person can read (and Slurm can hold), not the name of every node in the fleet.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_tool.findings import Finding
from cluster_tool.verdicts import (
    ADMISSION,
    FABRIC,
    GATE_MULTI,
    GATE_SINGLE,
    HEALTH,
    NOT_RUN,
    Proof,
    Scope,
    covered_nodes,
    judge_nodes,
    settle,
)

POOL = [f"gpu{i:03d}" for i in range(1, 9)] + ["login01", "head"]


def test_a_node_of_a_1024_node_job_without_a_proven_partner_names_a_few_of_them() -> None:
    nodes = [f"gpu{i:04d}" for i in range(1, 1025)]
    proof = Proof(passed={n: {HEALTH, FABRIC} for n in nodes})  # no single-node rung passed
    proof.add_job(nodes)
    verdicts, added = settle(nodes, [], proof)
    v = verdicts["gpu0002"]
    assert v.verdict == "unknown"
    [multi] = [u for u in v.unproven if u.startswith(GATE_MULTI)]
    # The first partners in name order, then a sign that there are more: not 1,023 names.
    assert multi.startswith(f"{GATE_MULTI}: no proven partner (gpu0001, gpu0003, gpu0004, ")
    assert multi.endswith(", ...)")
    assert len(multi) < 200
    assert all(len(f.message) < 400 for f in added)


def _reference(
    scope: Sequence[str], findings: Sequence[Finding], proof: Proof, required: Sequence[str]
) -> dict[str, tuple[str, str | None, tuple[str, ...], frozenset[str]]]:
    """The admission rule as the module's docstring says it, one node and one partner at a time
    (quadratic, and plain): (verdict, reason, checks, missing stages) per node."""
    partners = {n: {p for job in proof.jobs if n in job for p in job} - {n} for n in POOL}
    cover = {id(f): covered_nodes(f, scope) for f in findings}

    def errors_on(node: str) -> list[Finding]:
        return [f for f in findings if f.fails and node in cover[id(f)]]

    def clean(node: str) -> bool:
        return not errors_on(node)

    def alone_ok(node: str) -> bool:
        have = proof.passed.get(node, set())
        return node in proof.earlier or all(s in have for s in required if s != GATE_MULTI)

    def gaps(node: str) -> frozenset[str]:
        if node in proof.earlier:
            return frozenset()
        have = proof.passed.get(node, set())
        missing = {s for s in required if s != GATE_MULTI and s not in have}
        if GATE_MULTI in required and not any(
            p in proof.trusted or p in proof.earlier or (p in scope and clean(p) and alone_ok(p))
            for p in partners[node]
        ):
            missing.add(GATE_MULTI)
        return frozenset(missing)

    out = {}
    for node in scope:
        mine = errors_on(node)
        named = [f for f in mine if f.node == node and f.check not in NOT_RUN]
        not_run = [f for f in mine if f.check in NOT_RUN]
        held = [f for f in mine if f.node != node and f.check not in NOT_RUN]
        if named:
            out[node] = ("fail", named[0].message, tuple(sorted({f.check for f in named})), None)
            continue
        missing = gaps(node)
        if not_run:
            out[node] = ("unknown", not_run[0].message, _checks(not_run), missing)
        elif held:
            out[node] = ("held", held[0].message, _checks(held), missing)
        elif missing:
            out[node] = ("unknown", "not proven", (), missing)
        else:
            out[node] = ("pass", None, (), frozenset())
    return out  # type: ignore[return-value]


def _checks(found: Sequence[Finding]) -> tuple[str, ...]:
    return tuple(sorted({f.check for f in found}))


_nodes = st.sampled_from(POOL)
_finding = st.one_of(
    st.builds(
        lambda c, n, sev: Finding(check=c, node=n, severity=sev, message=f"{c} on {n}"),
        st.sampled_from(["gpu.ecc", "os.unreachable", "fabric.discover", "ib.counters-unread"]),
        _nodes,
        st.sampled_from(["error", "error", "warning"]),
    ),
    st.builds(
        lambda a, b: Finding(check="nccl.path", component=f"path {a} <-> {b}", message="path"),
        _nodes,
        _nodes,
    ),
    st.builds(
        lambda ns: Finding(check="nccl.full", component="job " + ",".join(ns), message="full"),
        st.lists(_nodes, min_size=1, max_size=4),
    ),
    st.just(Finding(check="nccl.fleet", message="fleet-wide busbw under the floor")),
    st.just(Finding(check="gpu.ecc", component="job gpu[", message="unreadable hostlist")),
)


@settings(max_examples=400, deadline=None)
@given(
    scope=st.lists(_nodes, min_size=1, max_size=8, unique=True),
    stages=st.dictionaries(_nodes, st.sets(st.sampled_from([HEALTH, FABRIC, GATE_SINGLE]))),
    jobs=st.lists(st.lists(_nodes, min_size=1, max_size=6), max_size=5),
    trusted=st.sets(_nodes, max_size=2),
    earlier=st.sets(_nodes, max_size=2),
    findings=st.lists(_finding, max_size=5),
    required=st.sampled_from([ADMISSION, (HEALTH,), (HEALTH, GATE_MULTI)]),
)
def test_verdicts_follow_the_rule_stated_plainly(
    scope: list[str],
    stages: dict[str, set[str]],
    jobs: list[list[str]],
    trusted: set[str],
    earlier: set[str],
    findings: list[Finding],
    required: tuple[str, ...],
) -> None:
    proof = Proof(passed=stages, trusted=trusted, earlier=earlier)
    for job in jobs:
        proof.add_job(job)
    got = judge_nodes(scope, findings, proof, required)
    want = _reference(scope, findings, proof, required)
    index = Scope(scope)
    for f in findings:
        covered = covered_nodes(f, scope)
        assert [n for n in scope if n in covered] == covered  # the scope's order
        assert {n for n in POOL if index.covers(f, n)} == set(covered)
    for node in scope:
        v = got[node]
        verdict, reason, checks, missing = want[node]
        assert v.verdict == verdict, node
        assert v.checks_failed == checks, node
        if verdict != "fail":
            assert v.missing == missing, node
        if reason != "not proven":
            assert v.reason == reason, node
        else:
            assert v.reason is not None and v.reason.startswith("not proven: "), node
