"""The version probe: one read-only shell command that prints what a node runs (kernel, loaded
driver, fabric manager, the packages of the stack, each RDMA device's type, firmware and PSID,
the Slurm the pyxis plugin was built against),
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

# Where the enroot_pyxis role installs the plugin (roles/enroot_pyxis/vars); a plugstack line
# naming spank_pyxis.so elsewhere (a packaged pyxis) wins.
PYXIS_PLUGIN = "/usr/local/lib/slurm/spank_pyxis.so"

# The Slurm pyxis was built against: every Slurm plugin carries `plugin_version`, the
# SLURM_VERSION_NUMBER ((major << 16) | (minor << 8) | micro) of the headers it was compiled
# with, and slurmd refuses a SPANK plugin whose major.minor differs from its own ("Incompatible
# Slurm plugin version", src/common/plugin.c). The word is read out of the ELF file with
# readelf and od, never by loading it: the symbol's address and section, the section's file
# offset. No readelf (binutils), no plugin: no line.
_PYXIS = (
    "( so=$(sed -n 's|^[[:space:]]*[a-z]*[[:space:]]*\\(/[^[:space:]]*spank_pyxis[.]so\\).*|\\1|p' "
    "/etc/slurm/plugstack.conf /etc/slurm/plugstack.conf.d/*.conf 2>/dev/null | head -n 1); "
    f'[ -n "$so" ] || so={PYXIS_PLUGIN}; '
    '[ -r "$so" ] && command -v readelf >/dev/null 2>&1 || exit 0; '
    'set -- $(readelf -Ws "$so" | '
    'awk \'$4 == "OBJECT" && $8 == "plugin_version" {print $2, $7; exit}\'); '
    "[ $# -eq 2 ] || exit 0; "
    'set -- "$1" $(readelf -WS "$so" | sed -n "s/^ *\\[ *$2\\] *//p"); '
    "[ $# -ge 5 ] || exit 0; "
    "v=$(od -An -tu4 -j $((0x$1 - 0x$4 + 0x$5)) -N4 \"$so\" | tr -d ' '); "
    "[ -n \"$v\" ] && printf 'pyxis_slurm %d.%02d.%d\\n' "
    "$((v >> 16)) $(((v >> 8) & 255)) $((v & 255)); "
    "true ); "
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
    "done; " + _PYXIS + "true"
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
