"""`python -m cluster_tool.compat SPEC`: the spec's version pins against the compatibility matrix,
alone. The site playbook's preflight runs it on the rendered inventory's spec.json, whose other
sections a lab or site may have filled in ways `spec check` would question (connection
variables); the versions are what this check is for. Exit 0 when every rule holds, 2 otherwise,
one line per broken rule on stderr."""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m cluster_tool.compat SPEC\n")
        return 2
    import yaml
    from pydantic import ValidationError

    from cluster_tool.compat.spec import spec_problems
    from cluster_tool.spec.models import Cluster

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
