"""The versions a spec pins, each with the spec path it comes from, and the matrix rules they
break, as located spec problems (checked by `spec check`, before any host is touched).

`python -m cluster_tool.spec.pins SPEC` runs this check alone: the site playbook's preflight runs
it on the rendered inventory's spec.json, whose other sections a lab or site may have filled in
ways `spec check` would question (connection variables); the versions are what this check is
for. Exit 0 when every rule holds, 2 otherwise, one line per broken rule on stderr."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster_tool.compat.matrix import Matrix, evaluate, load_matrix
from cluster_tool.spec.models import Cluster

Loc = tuple[str | int, ...]

# What the roles do when the spec's ansible_vars leave these unset (roles/*/defaults/main.yml;
# a unit test holds the two together).
GPUDIRECT_MODE_DEFAULT = "dmabuf"
OPEN_MODULES_DEFAULT = True

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


@dataclass(frozen=True)
class Pin:
    """One component's version as the spec decides it, where it is set (for a default, where
    it would be), and whether the spec writes it or leaves it to the default."""

    version: str
    loc: Loc
    written: bool


def spec_pins(cluster: Cluster) -> dict[str, Pin]:
    """Matrix component -> the version this spec installs."""
    software = cluster.software
    written = software.model_fields_set if "software" in cluster.model_fields_set else set()

    def field(name: str) -> Pin:
        return Pin(str(getattr(software, name)), ("software", name), name in written)

    pins = {
        "nvidia_driver_branch": field("nvidia_driver_branch"),
        "nvidia_driver": field("nvidia_driver_version"),
        "cuda": field("cuda_version"),
        "doca": field("doca_ofed_version"),
        "nccl": field("nccl_version"),
        "sharp_plugin": field("sharp_plugin_version"),
        "dcgm": field("dcgm_version"),
        "dcgm_exporter": field("dcgm_exporter_version"),
    }
    # Unset, the distribution's own release per OS (spec check holds a written one to it).
    if software.slurm_version is not None:
        pins["slurm"] = field("slurm_version")
    mode = _ansible_var(cluster, "gpudirect_rdma_mode", GPUDIRECT_MODE_DEFAULT)
    if mode is not None:
        pins["gpudirect_mode"] = mode
    open_modules = _ansible_var(cluster, "nvidia_driver_open_modules", OPEN_MODULES_DEFAULT)
    if open_modules is not None:
        pins["nvidia_open_modules"] = open_modules
    return pins


def _ansible_var(cluster: Cluster, name: str, default: Any) -> Pin | None:
    """A role variable as the spec's ansible_vars set it, else the role's default; None when
    its value is only known on the controller (a template) or is not a plain value."""
    written = name in cluster.ansible_vars
    loc: Loc = ("ansible_vars", name) if written else ("ansible_vars",)
    value = cluster.ansible_vars.get(name, default)
    if isinstance(value, bool):
        return Pin("true" if value else "false", loc, written)
    if isinstance(value, int | float):
        return Pin(str(value), loc, written)
    if not isinstance(value, str) or "{{" in value or "{%" in value:
        return None
    word = value.strip().lower()
    if isinstance(default, bool):
        if word in _TRUE:
            return Pin("true", loc, written)
        if word in _FALSE:
            return Pin("false", loc, written)
        return None
    return Pin(value.strip(), loc, written)


def spec_problems(cluster: Cluster, matrix: Matrix | None = None) -> list[tuple[Loc, str]]:
    """Every matrix rule the spec's pins break, located at the pin to change: the one the rule
    constrains if the spec writes it, else one the spec writes that brought the rule in (a
    spec that sets `cuda_version: "12.8"` and leaves the driver alone hears it at cuda_version)."""
    pins = spec_pins(cluster)
    known = {component: pin.version for component, pin in pins.items()}
    problems: list[tuple[Loc, str]] = []
    for violation in evaluate(matrix or load_matrix(), known):
        blamed = pins[violation.component]
        if not blamed.written:
            others = sorted(violation.rule.components() - {violation.component})
            blamed = next((pins[c] for c in others if pins[c].written), blamed)
        problems.append((blamed.loc, violation.message))
    return problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m cluster_tool.spec.pins SPEC\n")
        return 2
    import yaml
    from pydantic import ValidationError

    path = Path(args[0])
    try:
        cluster = Cluster.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        sys.stderr.write(f"{path}: not a cluster spec: {first}\n")
        return 2
    problems = spec_problems(cluster)
    for loc, message in problems:
        where = ".".join(str(part) for part in loc)
        sys.stderr.write(f"{path}: {where}: {message}\n")
    if problems:
        return 2
    sys.stdout.write(f"{path}: the version pins keep the compatibility matrix\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
