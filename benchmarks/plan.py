"""Where the time of `cluster-tool plan` goes, and how the search grows with the cluster.

Measured side by side in one run: importing the whole CLI (every area's modules), loading
`examples/h100-1su.yml`, planning Llama 3 70B on it (search + placement + JSON), and the same
search for Llama 3 405B on 2,048 nodes (16,384 GPUs) as a ratio to the 1-SU search. The goal
from issue 10 is the whole command under a second on the 1-SU example.

Run: `.venv/bin/python benchmarks/plan.py`. Prints; asserts nothing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _best_of(n: int, fn: object) -> float:
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    start = time.perf_counter()
    import cluster_tool.cli  # noqa: F401  (what every command pays before it runs)

    import_s = time.perf_counter() - start

    from cluster_tool.plan import PRESETS, Assumptions, ClusterShape, Training, plan, plan_json
    from cluster_tool.spec import load_spec

    spec_path = ROOT / "examples" / "h100-1su.yml"
    load_s = _best_of(3, lambda: load_spec(spec_path))
    shape = ClusterShape.from_spec(load_spec(spec_path))
    model = PRESETS["llama3-70b"]
    training = Training(global_batch=512)
    assumptions = Assumptions()

    def one_su() -> None:
        result = plan(model, shape, training, assumptions)
        plan_json(model, shape, training, assumptions, result, top=5)

    one_su_s = _best_of(3, one_su)

    big = ClusterShape.synthetic(nodes=2048, nodes_per_su=32)
    big_model = PRESETS["llama3-405b"]
    big_training = Training(global_batch=2048)

    def full_scale() -> None:
        result = plan(big_model, big, big_training, assumptions)
        plan_json(big_model, big, big_training, assumptions, result, top=5)

    big_s = _best_of(1, full_scale)

    total = import_s + load_s + one_su_s
    print(f"{'step':<44}{'seconds':>10}{'share':>8}")
    for name, value in (
        ("import cluster_tool.cli (all areas)", import_s),
        ("load_spec(examples/h100-1su.yml)", load_s),
        ("plan llama3-70b on 31 nodes (+ JSON)", one_su_s),
    ):
        print(f"{name:<44}{value:>10.3f}{value / total:>8.0%}")
    print(f"{'total, 1-SU command':<44}{total:>10.3f}")
    print(
        f"{'plan llama3-405b on 2,048 nodes (+ JSON)':<44}{big_s:>10.3f}"
        f"{big_s / one_su_s:>7.1f}x of the 1-SU plan, for {2048 / 31:.0f}x the nodes"
    )


if __name__ == "__main__":
    main()
