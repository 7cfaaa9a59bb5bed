"""Time the history store's question, "the baseline of every node", on 1,024 nodes x 50 runs.

Run: `.venv/bin/python benchmarks/history.py [NODES] [RUNS]` (default 1024 50). Builds a store
in a temporary folder the way validations fill it, run by run through `HistoryStore.add_run`: per
node per run the gate's busbw (two single-node rungs and the pair screens, 12 by default) and
the health figures of 8 GPUs (ECC, remapped rows, temperature) and 8 HCA ports (BER and
mlxlink counter rates), about 100 rows. Then prints the store's size, the time to record one
more run of the whole fleet, and the time of `baselines()` over every node's last 20 runs (the
spec's default window), cold (a fresh connection) and warm (goal: under 1 s). Never a test
assertion.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cluster_tool.history import STORE_NAME, HistoryStore, Identity, Measurement

GPUS = 8
HCAS = 8
SCREENS = 12
WINDOW = 20


def fleet(nodes: int) -> dict[str, Identity]:
    return {
        f"gpu{n:04d}": Identity(
            f"gpu{n:04d}",
            tuple(f"16501{n:04d}{g:04d}" for g in range(GPUS)),
            tuple(f"0xa088c203{n:04x}{h:04x}" for h in range(HCAS)),
        )
        for n in range(1, nodes + 1)
    }


def one_run(names: list[str], rng: random.Random) -> list[Measurement]:
    found: list[Measurement] = []
    for i, node in enumerate(names):
        pace = rng.gauss(1.0, 0.01)
        found.append(Measurement(node, "busbw_gbs", "single-nvls nvls-all_reduce", 480 * pace))
        found.append(Measurement(node, "busbw_gbs", "single-ring ring-all_reduce", 360 * pace))
        for s in range(SCREENS):
            partner = names[(i + s + 1) % len(names)]
            found.append(Measurement(node, "busbw_gbs", "pairs all_reduce", 469 * pace, (partner,)))
        for g in range(GPUS):
            key = f"GPU{g}"
            for metric, value in (
                ("ecc_correctable", 0.0),
                ("ecc_uncorrectable", 0.0),
                ("remapped_rows_correctable", 0.0),
                ("remapped_rows_uncorrectable", 0.0),
                ("gpu_temp_c", float(rng.randint(28, 34))),
            ):
                found.append(Measurement(node, metric, key, value))
        for h in range(HCAS):
            key = f"mlx5_{h}"
            for metric, value in (
                ("raw_ber", 1e-15 * rng.uniform(0.5, 2)),
                ("effective_ber", 1e-255),
                ("effective_errors_per_h", 0.0),
                ("link_down_per_h", 0.0),
                ("link_error_recovery_per_h", 0.0),
            ):
                found.append(Measurement(node, metric, key, value))
    return found


def main() -> None:
    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    rng = random.Random(20)
    ids = fleet(nodes)
    names = list(ids)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / STORE_NAME
        started = time.perf_counter()
        with HistoryStore.open(path) as store:
            for r in range(runs):
                store.add_run(f"run{r:04d}", "validate-after", ids.values(), one_run(names, rng))
        built = time.perf_counter() - started
        rows = runs * len(one_run(names[:1], rng)) * nodes
        size_mb = sum(p.stat().st_size for p in Path(tmp).iterdir()) / 1e6
        print(f"store: {nodes} nodes x {runs} runs, ~{rows:,} measurements, {size_mb:.0f} MB, "
              f"built in {built:.1f} s ({built / runs:.2f} s a run)")  # fmt: skip

        fingerprints = [i.fingerprint for i in ids.values()]
        started = time.perf_counter()
        with HistoryStore.open(path, read_only=True) as store:
            cold_baselines = store.baselines(fingerprints, window=WINDOW)
        cold = time.perf_counter() - started
        with HistoryStore.open(path, read_only=True) as store:
            store.baselines(fingerprints, window=WINDOW)
            started = time.perf_counter()
            warm_baselines = store.baselines(fingerprints, window=WINDOW)
            warm = time.perf_counter() - started
        assert len(cold_baselines) == len(warm_baselines)
        print(
            f"baseline of {nodes} nodes over their last {WINDOW} of {runs} runs "
            f"({len(warm_baselines)} busbw series): cold {cold:.3f} s, warm {warm:.3f} s "
            f"(goal: under 1 s)"
        )
        started = time.perf_counter()
        with HistoryStore.open(path) as store:
            store.add_run("one-more", "validate-after", ids.values(), one_run(names, rng))
        print(f"recording one more run of {nodes} nodes: {time.perf_counter() - started:.2f} s")


if __name__ == "__main__":
    main()
