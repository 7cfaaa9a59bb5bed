"""A role's tags select its tasks: `--tags enroot_pyxis` must run enroot_pyxis' install and
configure tasks, not only the include that loads them. Tags on an `include_tasks` select the
include alone; the included tasks get them only through its `apply` keyword (include_tasks'
documentation: apply "accepts a hash of task keywords (e.g. tags, become) that will be applied to
the tasks within the include"; ansible/ansible#30882, debops/debops#2469: `-t` runs none of an
include_tasks' tasks). Found by the lab's container test: the tools phase with
`--tags enroot_pyxis` reported ok, changed=0 and installed nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REPO

INCLUDE = "ansible.builtin.include_tasks"


def _tasks(path: Path) -> list[dict[str, Any]]:
    loaded = yaml.safe_load(path.read_text()) or []
    tasks: list[dict[str, Any]] = []
    for task in loaded:
        tasks.append(task)
        for key in ("block", "rescue", "always"):
            tasks.extend(task.get(key) or [])
    return tasks


def test_every_tagged_include_hands_its_tags_to_the_tasks_it_loads() -> None:
    includes = 0
    for path in sorted((REPO / "roles").glob("*/tasks/*.yml")):
        for task in _tasks(path):
            if INCLUDE not in task and "include_tasks" not in task:
                continue
            includes += 1
            tags = set(task.get("tags") or [])
            args = task.get(INCLUDE) or task.get("include_tasks")
            applied = (
                set((args.get("apply") or {}).get("tags") or [])
                if isinstance(args, dict)
                else set()
            )
            assert tags <= applied, (
                f"{path.relative_to(REPO)}: {task.get('name')!r} is tagged {sorted(tags)} but "
                f"its tasks get {sorted(applied)} (use `apply: {{tags: [...]}}`)"
            )
    assert includes >= 10
