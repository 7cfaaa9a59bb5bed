"""Converge the lab with site.yml twice and print first-run vs no-op-run wall time side by side.

Usage: .venv/bin/python benchmarks/converge.py [--fresh [--spec FILE]] [--inventory DIR]
                                               [--stock] [-e KEY=VALUE ...]
       .venv/bin/python benchmarks/converge.py --count ARTIFACT_DIR [ARTIFACT_DIR ...]
`--fresh` re-creates the lab first (`cluster-tool lab down` + `lab up`) so the first run starts
from bare nodes. The goal: the second (no-change) run takes under 15% of the first.
`--stock` adds a third, no-op run with stock Ansible's linear strategy (ansible.cfg selects
mitogen's), so the two are compared on the same lab in one run. The slurmdbd password comes
from CLUSTER_TOOL_SLURMDBD_PASSWORD, as for `cluster-tool bringup`.

Each run also prints how many modules it executed on the hosts, read from its runner events,
and how many tasks it started. Under the stock strategy every module execution starts a Python
on the node that recompiles the module's utilities from the AnsiballZ zip; under mitogen one
interpreter per node serves the whole run, and what is left is the controller's per-task cost
(a worker per host and task, the templating): the ms/task figure. `--count` prints the module
count for runs already made (their ansible-runner artifact folders), with the tasks that
executed most. The events show one result per task and host, so the count is a floor: a
template or copy that finds its file in place still runs two modules (stat, then file).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from cluster_tool.ansible import PlaybookResult, run_playbook

REPO = Path(__file__).resolve().parents[1]


def _lab_inventory() -> Path:
    lab_dir = Path(os.environ.get("CLUSTER_TOOL_LAB_DIR", REPO / ".lab"))
    return lab_dir / "inventory"


# Actions that run on the controller only (no module starts on a host).
_CONTROLLER_ONLY = frozenset(
    {
        "set_fact",
        "assert",
        "debug",
        "fail",
        "include_tasks",
        "include_role",
        "import_tasks",
        "import_role",
        "include_vars",
        "meta",
        "validate_argument_spec",
        "add_host",
        "group_by",
    }
)


def module_runs(artifact_dir: Path) -> Counter[tuple[str, str]]:
    """(task, action) -> how many module executions a run's events show, loop items one each.

    A looped task reports each item (`runner_item_on_*`) and then a summary carrying `results`,
    which is not an execution of its own; a plain task reports one `runner_on_ok`/`_failed`.
    """
    runs: Counter[tuple[str, str]] = Counter()
    for path in sorted((artifact_dir / "job_events").glob("*.json")):
        raw = json.loads(path.read_text(encoding="utf-8"))
        event = raw.get("event")
        data = raw.get("event_data") or {}
        if event in {"runner_on_ok", "runner_on_failed"}:
            if "results" in (data.get("res") or {}):
                continue
        elif event not in {"runner_item_on_ok", "runner_item_on_failed"}:
            continue
        action = str(data.get("resolved_action") or data.get("task_action") or "")
        if action.rsplit(".", 1)[-1] in _CONTROLLER_ONLY:
            continue
        runs[(str(data.get("task")), action.rsplit(".", 1)[-1])] += 1
    return runs


def _executions(result: PlaybookResult) -> int | None:
    return sum(module_runs(result.artifact_dir).values()) if result.artifact_dir else None


def _summary(label: str, result: PlaybookResult) -> str:
    failed = ",".join(result.failed_hosts + result.unreachable_hosts) or "-"
    executions = _executions(result)
    tasks = sum(1 for e in result.events if e.event == "playbook_on_task_start")
    per_task = f"{1000 * result.wall_s / tasks:.0f} ms/task" if tasks else "-"
    return (
        f"{label:<12} {result.wall_s:8.1f} s  changed={result.changed_total:<4} "
        f"hosts={len(result.hosts):<3} failed={failed}  module runs={executions}  "
        f"tasks={tasks} ({per_task})"
    )


def _count(artifact_dirs: list[Path], top: int = 15) -> int:
    for artifact_dir in artifact_dirs:
        runs = module_runs(artifact_dir)
        print(f"{artifact_dir}: {sum(runs.values())} module runs")
        for (task, action), n in runs.most_common(top):
            print(f"  {n:4d}  {action:<20} {task}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", type=Path, help="inventory (default: the lab's)")
    parser.add_argument("--playbook", type=Path, default=REPO / "playbooks" / "site.yml")
    parser.add_argument("--fresh", action="store_true", help="re-create the lab first")
    parser.add_argument(
        "--spec", type=Path, help="lab spec for --fresh (a lab on another subnet needs its own)"
    )
    parser.add_argument(
        "--stock",
        action="store_true",
        help="a third, no-op run with stock Ansible's linear strategy instead of ansible.cfg's "
        "mitogen_linear, for the side-by-side ratio",
    )
    parser.add_argument("-e", dest="extra", action="append", default=[], help="KEY=VALUE")
    parser.add_argument(
        "--count",
        nargs="+",
        type=Path,
        metavar="ARTIFACT_DIR",
        help="only count the module runs of finished runs (ansible-runner artifact folders)",
    )
    args = parser.parse_args()
    if args.count:
        return _count(args.count)

    cli = [str(Path(sys.executable).parent / "cluster-tool"), "lab"]
    if args.fresh:
        subprocess.run([*cli, "down"], check=True, cwd=REPO)
        spec = ["--spec", str(args.spec)] if args.spec else []
        subprocess.run([*cli, "up", *spec], check=True, cwd=REPO)
    inventory = args.inventory or _lab_inventory()
    extravars = dict(item.split("=", 1) for item in args.extra)

    first = run_playbook(args.playbook, inventory, extravars=extravars)
    if not first.succeeded:
        print(_summary("first run", first))
        for event in first.failures()[:3]:
            print(f"  {event.host}: {event.task}: {event.message}")
        print("the first run failed: no ratio to print")
        return 1
    second = run_playbook(args.playbook, inventory, extravars=extravars)

    stock = None
    if args.stock:
        stock = run_playbook(
            args.playbook, inventory, extravars=extravars, envvars={"ANSIBLE_STRATEGY": "linear"}
        )
    print(_summary("first run", first))
    print(_summary("second run", second))
    if stock is not None:
        print(_summary("stock linear", stock))
        print(
            f"no-op, mitogen / stock linear strategy = {second.wall_s / stock.wall_s:.2f} "
            "(same lab, same run)"
        )
    ratio = second.wall_s / first.wall_s if first.wall_s else float("nan")
    verdict = "meets" if ratio < 0.15 else "misses"
    print(f"no-op / first = {ratio:.2f} ({verdict} the goal of < 0.15)")
    if second.changed_total:
        print(f"second run changed something on: {', '.join(second.changed_hosts)}")
    return 0 if first.succeeded and second.succeeded and second.changed_total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
