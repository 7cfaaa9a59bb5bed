"""The version-collect probe (`Versions`): one read-only shell command that prints what a node
runs (kernel, loaded driver, fabric manager, the packages of the stack, each HCA's model,
firmware and PSID), and the parser that reads its output back into a NodeVersions
(compat/readback.py judges it).

Every line the command prints is tagged, so a tool that is missing leaves its line out instead
of shifting the others: `kernel VERSION`, `module NAME VERSION`, `fabricmanager VERSION`,
`package NAME VERSION`, `hca DEVICE HCA_TYPE FIRMWARE PSID`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from cluster_tool.errors import ParseError
from cluster_tool.probes import Probe

if TYPE_CHECKING:
    from cluster_tool.compat.readback import NodeVersions

PROBE_NAME = "versions"

# The packages whose versions the matrix speaks of, by the names the roles install them under
# (roles/*/defaults, vars/): Debian's and SchedMD's Slurm packages both count.
_PACKAGES = (
    "nvidia-fabricmanager*",
    "doca-ofed",
    "libnccl2",
    "nccl-rdma-sharp-plugins",
    "slurmd",
    "slurm-wlm",
    "slurm-smd-slurmd",
    "nvslurm-plugin-pyxis",
)

# dpkg's status `ii` is installed, `hi` installed and held (the roles hold what they pin); `rc`
# and the rest are not installed.
# `nv-fabricmanager --version` prints `Fabric Manager version is : 550.127.08`; the daemon is
# asked, not dpkg, because a package can be upgraded under a daemon that still runs the old one.
COMMAND = (
    'echo "kernel $(uname -r)"; '
    "for m in nvidia mlx5_core; do "
    '[ -r "/sys/module/$m/version" ] && echo "module $m $(cat "/sys/module/$m/version")"; '
    "done; "
    "command -v nv-fabricmanager >/dev/null 2>&1 && "
    "nv-fabricmanager --version 2>&1 | "
    "sed -n 's/.*[Vv]ersion is *: *\\([^ ]*\\).*/fabricmanager \\1/p'; "
    "command -v dpkg-query >/dev/null 2>&1 && "
    "dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n' "
    + " ".join(f"'{p}'" for p in _PACKAGES)
    + " 2>/dev/null | sed -n 's/^[hi]i *\\([^ ]*\\) \\(.*\\)/package \\1 \\2/p'; "
    'for d in /sys/class/infiniband/*; do [ -e "$d/fw_ver" ] || continue; '
    'echo "hca ${d##*/} $(cat "$d/hca_type" 2>/dev/null || echo -) $(cat "$d/fw_ver") '
    '$(cat "$d/board_id" 2>/dev/null || echo -)"; '
    "done; true"
)

_LINE = re.compile(r"^(kernel|module|fabricmanager|package|hca) +(\S.*)$")
_DEBIAN_REVISION = re.compile(r"^(?:\d+:)?(?P<upstream>.+?)(?:-[^-]+)?$")

# package name -> matrix component
_COMPONENT = {
    "doca-ofed": "doca",
    "libnccl2": "nccl",
    "nccl-rdma-sharp-plugins": "sharp_plugin",
    "slurmd": "slurm",
    "slurm-wlm": "slurm",
    "slurm-smd-slurmd": "slurm",
}


def upstream(version: str) -> str:
    """A Debian package version without epoch and Debian revision: `1:3.3.9-1` -> `3.3.9`,
    `550.127.08-1` -> `550.127.08`. NCCL's `2.21.5-1+cuda12.4` is kept whole: its revision
    names the CUDA it was built for, and the matrix compares the leading numbers only."""
    if "+cuda" in version:
        return version.split(":", 1)[-1]
    found = _DEBIAN_REVISION.match(version.strip())
    return found.group("upstream") if found else version.strip()


def parse_versions(node: str, text: str) -> NodeVersions:
    """What the version probe printed on `node`, as a NodeVersions; ParseError naming the line
    that is none of the tagged forms."""
    # Here, not at the top: the probe class rides in node-check, which never parses it.
    from cluster_tool.compat.readback import HCA_MODELS, Hca, NodeVersions

    facts: dict[str, str] = {}
    hcas: list[Hca] = []
    driver: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        found = _LINE.match(line)
        if found is None:
            raise ParseError(f"versions: line {number} is not a version line", line=line)
        tag, rest = found.group(1), found.group(2).split()
        if tag == "kernel":
            facts["kernel"] = rest[0]
        elif tag == "module" and len(rest) == 2:
            if rest[0] == "nvidia":
                driver = rest[1]
            elif rest[0] == "mlx5_core":
                facts["mlx5_core"] = rest[1]
        elif tag == "fabricmanager":
            facts["fabricmanager"] = rest[0]
        elif tag == "package" and len(rest) == 2:
            name, version = rest
            if name.startswith("nvidia-fabricmanager"):
                facts.setdefault("fabricmanager_package", upstream(version))
            elif name == "nvslurm-plugin-pyxis":
                facts["pyxis"] = upstream(version)
            elif name in _COMPONENT:
                facts.setdefault(_COMPONENT[name], upstream(version))
        elif tag == "hca" and len(rest) == 4:
            device, hca_type, firmware, psid = rest
            model = HCA_MODELS.get(hca_type, None if hca_type == "-" else hca_type)
            hcas.append(Hca(device, model, firmware, None if psid == "-" else psid))
        else:
            raise ParseError(f"versions: line {number} has the wrong number of fields", line=line)
    # The daemon's own answer wins; the package stands in where the daemon was not asked.
    if "fabricmanager" not in facts and "fabricmanager_package" in facts:
        facts["fabricmanager"] = facts["fabricmanager_package"]
    facts.pop("fabricmanager_package", None)
    return NodeVersions(node, driver, tuple(hcas), (), facts)


class Versions(Probe):
    """What a node runs, per component; read by parse_versions (the node is the caller's)."""

    name = PROBE_NAME
    timeout_s = 60
    what = "the version probe"

    def command(self) -> str:
        return COMMAND

    def process(self, output: list[str]) -> NodeVersions:
        return parse_versions("", "\n".join(output))
