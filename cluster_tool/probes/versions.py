"""The version probe: one read-only shell command that prints what a node runs (kernel, loaded
driver, fabric manager, the packages of the stack, each RDMA device's type, firmware and PSID),
one tagged line per thing found, so a missing tool leaves its line out instead of shifting the
others. Read by cluster_tool.parsers.versions; judged by cluster_tool.checks.versions against
the compatibility matrix (cluster_tool.compat)."""

from __future__ import annotations

from cluster_tool.parsers.versions import VersionLines, parse_versions
from cluster_tool.probes import Probe

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


class Versions(Probe):
    """What a node runs, per component (`cluster-tool versions`; not read by check_node)."""

    name = PROBE_NAME
    timeout_s = 60
    what = "the version probe"

    def command(self) -> str:
        return COMMAND

    def process(self, output: list[str]) -> VersionLines:
        return parse_versions("\n".join(output))
