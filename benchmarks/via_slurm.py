"""Controller CPU per node of `validate --health` through the SSH fan-out and through one Slurm
job step (`--via slurm`), measured side by side in one run, printed as a ratio.

CPU is the controller process's and its reaped children's user+system time
(`resource.getrusage` RUSAGE_SELF + RUSAGE_CHILDREN) across one `run_validate` per path; each
path is run `--repeat` times, alternating, medians kept. Never a test assertion.

Targets, said in the output:
- the lab, when one is up (CLUSTER_TOOL_LAB_DIR, default `<repo>/.lab`) and cluster-tool is
  installed on its GPU nodes: SSH to each node through the lab's ssh_config, and the real step
  through `srun` on the head (`--slurm-via head`), records in the lab's shared folder. The
  nodes' own work is on the nodes in both paths, as on a cluster.
- else a fake of N nodes (the GPU nodes of `--spec`, default examples/h100-1su.yml, 32): the
  SSH path dials each node's name on one private sshd on 127.0.0.1 (benchmarks/fanout.py's; root,
  sshd, unshare), which runs the probe script on this machine; the step is a fake Slurm whose
  `srun` is one child process (`cp`) that lays down, per node, the node-check record computed
  before the measurement from those same outputs (on a cluster the nodes compute it). Node
  states come from a fake `scontrol show node -o`, all idle.

`--sizes 256 1024 4096` measures the step path alone at those fleet sizes, side by side:
examples/h100-1su.yml widened (benchmarks/validate_controller.py's), every node's record the
node-check of the real 8x H100 captures that benchmark answers with, laid down by the fake
srun. Prints ms of controller CPU per node and its growth against the smallest size (the node
files written, the step, each record read and judged).

Run (as root): `.venv/bin/python benchmarks/via_slurm.py [--repeat N] [--spec FILE]`, or
`.venv/bin/python benchmarks/via_slurm.py --sizes 256 1024 4096 [--repeat N]` (no root).
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from cluster_tool.checks.node import check_node, expectations_for  # noqa: E402
from cluster_tool.findings import Report  # noqa: E402
from cluster_tool.remote.fanout import ParamikoTransport  # noqa: E402
from cluster_tool.render.engine import render_nccl_conf  # noqa: E402
from cluster_tool.slurm import AdminSlurm, connect  # noqa: E402
from cluster_tool.spec import load_spec  # noqa: E402
from cluster_tool.spec.models import Cluster  # noqa: E402
from cluster_tool.workflows.collect import ValidateResult, run_validate  # noqa: E402


def cpu_s() -> float:
    """User + system seconds of this process and its reaped children so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measured(run: Callable[[], ValidateResult]) -> tuple[float, ValidateResult]:
    before = cpu_s()
    result = run()
    return cpu_s() - before, result


class FakeStepSlurm:
    """Slurm for the fake: every node idle; the step lays down the prepared records."""

    def __init__(self, nodes: Sequence[str], records: dict[str, str], folder: Path) -> None:
        self.nodes, self.folder = list(nodes), folder
        for name, text in records.items():
            (folder / f"{name}.json").write_text(text)

    def slurm(self) -> AdminSlurm:
        return AdminSlurm(run=self.scontrol, step=self.srun)

    def scontrol(self, argv: Sequence[str]) -> str:
        return "".join(f"NodeName={n} State=IDLE Partitions=gpu Reason=\n" for n in self.nodes)

    def srun(self, argv: Sequence[str], timeout: float) -> tuple[int, str]:
        output = next(a.split("=", 1)[1] for a in argv if a.startswith("--output="))
        out_dir = Path(output).parent
        # srun's own process on the controller's side: one child, whatever the node count.
        subprocess.run(
            ["sh", "-c", f"cp {shlex.quote(str(self.folder))}/*.json {shlex.quote(str(out_dir))}/"],
            check=True,
        )
        return 0, ""


def fake_paths(
    spec: Path, work: Path
) -> tuple[str, Cluster, Callable[[], ValidateResult], Callable[[], ValidateResult]]:
    from fanout import localhost_sshd  # benchmarks/fanout.py

    cluster = load_spec(spec)
    nodes = [n.name for n in cluster.gpu_nodes()]
    daemon, config = localhost_sshd(work, len(nodes))
    # fanout's config names bench001..; the spec's names are dialled the same way.
    text = config.read_text().replace(
        "Host " + " ".join(f"bench{i:03d}" for i in range(1, len(nodes) + 1)),
        "Host " + " ".join(nodes),
    )
    config.write_text(text)
    transport = ParamikoTransport(config)

    def over_ssh() -> ValidateResult:
        return run_validate(cluster, fabric=False, dcgm=False, transport=transport, concurrency=32)

    # The records the nodes would write: node-check over what this machine printed.
    first = over_ssh()
    nccl_conf = render_nccl_conf(cluster)
    records = {
        name: json.dumps(
            Report.from_findings(
                check_node(expectations_for(cluster, name, nccl_conf=nccl_conf), result.outputs),
                {"node": name},
            ).to_json()
        )
        for name, result in first.results.items()
    }
    prepared = work / "records"
    prepared.mkdir()
    fake = FakeStepSlurm(nodes, records, prepared)
    shared = work / "shared"
    shared.mkdir()

    def via_slurm() -> ValidateResult:
        return run_validate(cluster, fabric=False, dcgm=False, slurm=fake.slurm(), shared=shared)

    def stop() -> None:
        daemon.terminate()

    import atexit

    atexit.register(stop)
    what = f"a fake of {len(nodes)} nodes ({spec.name}): SSH to one sshd on 127.0.0.1, a fake srun"
    return what, cluster, over_ssh, via_slurm


def lab_paths() -> (
    tuple[str, Cluster, Callable[[], ValidateResult], Callable[[], ValidateResult]] | None
):
    try:
        from cluster_lab import lifecycle
        from cluster_lab.config import LabConfig
    except ImportError:
        return None
    config = LabConfig.from_env()
    status = lifecycle.status(config)
    if not status.running or not status.nodes:
        return None
    probe = subprocess.run(
        ["ssh", "-F", str(status.ssh_config), "gpu001", "command -v cluster-tool"],
        capture_output=True, check=False, timeout=30,
    )  # fmt: skip
    if probe.returncode != 0:
        print("a lab is up but cluster-tool is not installed on its nodes: using the fake")
        return None
    cluster = load_spec(REPO / "examples" / "lab.yml")
    ssh_config = Path(status.ssh_config)
    transport = ParamikoTransport(ssh_config)
    shared = config.shared_dir

    def over_ssh() -> ValidateResult:
        return run_validate(cluster, fabric=False, dcgm=False, transport=transport)

    def via_slurm() -> ValidateResult:
        return run_validate(
            cluster, fabric=False, dcgm=False, slurm=connect("head", ssh_config), shared=shared,
            transport=transport,
        )  # fmt: skip

    return (
        f"the lab in {config.lab_dir} ({len(cluster.gpu_nodes())} GPU nodes)",
        cluster,
        over_ssh,
        via_slurm,
    )


def step_at_sizes(sizes: Sequence[int], repeat: int) -> int:
    """The Slurm step's controller CPU per node at each fleet size, the sizes taking turns."""
    from validate_controller import node_outputs, widened  # benchmarks/validate_controller.py

    from cluster_tool.probes import ProbeOutput

    with tempfile.TemporaryDirectory(prefix="via-slurm-sizes-") as tmp:
        paths: dict[int, Callable[[], ValidateResult]] = {}
        for n in sorted(sizes):
            cluster = widened(n)
            outputs = {k: ProbeOutput(rc, text) for k, (rc, text) in node_outputs(cluster).items()}
            first = cluster.gpu_nodes()[0].name
            # One node-check record, as every node of a healthy fleet would write its own.
            template = json.dumps(
                Report.from_findings(
                    check_node(expectations_for(cluster, first), outputs), {"node": first}
                ).to_json()
            )
            work = Path(tmp) / str(n)
            (work / "records").mkdir(parents=True)
            (work / "shared").mkdir()
            nodes = [h.name for h in cluster.gpu_nodes()]
            records = {name: template.replace(f'"{first}', f'"{name}') for name in nodes}
            fake = FakeStepSlurm(nodes, records, work / "records")

            def via_slurm(
                cluster: Cluster = cluster,
                fake: FakeStepSlurm = fake,
                shared: Path = work / "shared",
            ) -> ValidateResult:
                return run_validate(
                    cluster, fabric=False, dcgm=False, slurm=fake.slurm(), shared=shared
                )

            paths[n] = via_slurm
        best = dict.fromkeys(paths, float("inf"))
        for _ in range(repeat):
            for n, run in paths.items():
                cpu, result = measured(run)
                assert result.report.summary["slurm_step"]["nodes"] == n, result.report.summary
                best[n] = min(best[n], cpu / n)
    first_cost = best[min(best)]
    print(f"{'N':>6} {'ms per node':>12} {'x smallest':>10}")
    for n, cost in best.items():
        print(f"{n:>6} {cost * 1e3:>12.2f} {cost / first_cost:>10.2f}")
    worst = max(cost / first_cost for cost in best.values())
    print(
        f"\nvalidate --via slurm (fake srun), controller CPU with children, best of {repeat}; "
        f"worst growth per node {worst:.2f}x"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--spec", type=Path, default=REPO / "examples" / "h100-1su.yml")
    parser.add_argument("--sizes", type=int, nargs="+")
    args = parser.parse_args()
    if args.sizes:
        return step_at_sizes(args.sizes, args.repeat)
    with tempfile.TemporaryDirectory(prefix="via-slurm-bench-") as tmp:
        found = lab_paths()
        what, cluster, over_ssh, via_slurm = found or fake_paths(args.spec, Path(tmp))
        n = len(cluster.gpu_nodes())
        ssh_cpu: list[float] = []
        step_cpu: list[float] = []
        for _ in range(args.repeat):
            cpu, ssh_result = measured(over_ssh)
            ssh_cpu.append(cpu)
            cpu, step_result = measured(via_slurm)
            step_cpu.append(cpu)
        assert ssh_result.unreachable == [], ssh_result.unreachable
        assert step_result.unreachable == [], step_result.unreachable
        assert step_result.report.summary["slurm_step"]["nodes"] == n, step_result.report.summary
        ssh_per = statistics.median(ssh_cpu) / n * 1000
        step_per = statistics.median(step_cpu) / n * 1000
        print(f"targets: {what}; {args.repeat} runs per path, medians")
        print(f"ssh fan-out : {ssh_per:8.2f} ms controller CPU per node")
        print(f"slurm step  : {step_per:8.2f} ms controller CPU per node")
        print(f"ratio ssh/slurm: {ssh_per / step_per:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
