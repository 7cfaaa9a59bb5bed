"""Shared test fixtures: where the real captured outputs and the project's own fixtures live."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parent.parent
# Real outputs captured on real H100/H200 systems live in the shared folder beside the
# checkout (CI lays a copy there too). Missing them is an error, never a skip.
REAL_OUTPUTS = Path(
    os.environ.get(
        "CLUSTER_TOOL_REAL_OUTPUTS", REPO.parent / "shared" / "fixtures" / "real-outputs"
    )
)
FIXTURES = REPO / "tests" / "fixtures"
# Cluster contexts (cluster_tool.context): none unless a test writes one, so a demo lab's in
# ~/.cluster-tool/clusters never steers a test; the lab fixture points this at its own, and
# tests/unit/conftest.py gives every unit test an empty one.
os.environ["CLUSTER_TOOL_CONTEXT_DIR"] = tempfile.mkdtemp(prefix="cluster-tool-contexts-")

# The machines are shared and noisy: no per-example deadline (timings belong in benchmarks/),
# and on CI a fixed seed so a red run can be reproduced.
settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "ci", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") else "default")


def read_real_output(name: str) -> str:
    """A real captured output, without its first line (which names the source)."""
    path = REAL_OUTPUTS / name
    if not path.is_file():
        raise FileNotFoundError(f"real output {path} is missing; the shared fixtures are required")
    text = path.read_text(encoding="utf-8")
    return text.split("\n", 1)[1] if "\n" in text else ""


@pytest.fixture
def real_output() -> object:
    return read_real_output


_SECTION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):", re.MULTILINE)


def with_sections(spec_text: str, tail: str) -> str:
    """`spec_text` with the top-level sections of the YAML text `tail` added; a section the spec
    has already (examples/lab.yml's `software`) gets the tail's keys at its end instead of a
    second, duplicate key."""
    lines = spec_text.rstrip("\n").split("\n")
    for block in re.split(r"\n(?=[A-Za-z_][A-Za-z0-9_]*:)", tail.strip("\n")):
        match = _SECTION.match(block)
        key = match.group(1) if match else None
        starts = [i for i, line in enumerate(lines) if key and line.startswith(f"{key}:")]
        body = block.split("\n")[1:]
        if not starts or not body or block.split("\n")[0].strip() != f"{key}:":
            lines += block.split("\n")
            continue
        end = next(
            (i for i in range(starts[0] + 1, len(lines)) if _SECTION.match(lines[i])), len(lines)
        )
        while end > starts[0] + 1 and not lines[end - 1].strip():
            end -= 1
        lines[end:end] = body
    return "\n".join(lines) + "\n"
