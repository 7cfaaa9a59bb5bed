"""The device simulator packages: .debs under the vendors' package names and versions, whose
payload is the simulator (this package, vendored) behind the vendors' executables.

Built on the lab host with `dpkg-deb`; the lab publishes them in its apt repository, so the
roles install them exactly as they would install NVIDIA's, Mellanox's or DCGM's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cluster_tool.errors import ClusterToolError

from .nccl_tests import STEPS_DIR

if TYPE_CHECKING:
    from cluster_lab.config import LabConfig

SIM_SOURCE = Path(__file__).resolve().parent
REPO_ROOT = SIM_SOURCE.parents[1]
# Where the payload keeps the vendored simulator inside a node.
LIB_DIR = "usr/lib/cluster-tool-lab"
VENDORED_AS = "labsim"
# Modules of this package that are host-side only and never go into a node.
HOST_ONLY = {"packages.py"}

# Timestamp of every file in the packages (reproducible builds): 2024-01-01T00:00:00Z.
BUILD_EPOCH = 1_704_067_200

DRIVER_BRANCH = "570"
DRIVER_VERSION = "570.172.08-1"

# Package name -> version, as the roles pin them (roles/*/vars/Debian_12.yml, defaults/).
DEFAULT_VERSIONS: dict[str, str] = {
    "nvidia-open-kernel-dkms": DRIVER_VERSION,
    "nvidia-driver-cuda": DRIVER_VERSION,
    "nvidia-persistenced": DRIVER_VERSION,
    f"nvidia-fabricmanager-{DRIVER_BRANCH}": DRIVER_VERSION,
    f"libnvidia-nscq-{DRIVER_BRANCH}": DRIVER_VERSION,
    "datacenter-gpu-manager": "1:3.3.9",
    # DCGM 4 comes as its core and the flavour for the driver's CUDA major.
    "datacenter-gpu-manager-4-core": "1:4.2.3-1",
    "datacenter-gpu-manager-4-cuda12": "1:4.2.3-1",
    "dcgm-exporter": "4.2.3-4.1.3-1",
    "doca-ofed": "3.1.0-1",
    # MFT, which DOCA-Host's doca-ofed profile brings (doca-host-basic is the one "without MFT"):
    # the release DOCA 3.1.0 lists (its legal notices' component table).
    "mft": "4.33.0-169",
    "libnccl2": "2.26.2-1+cuda12.8",
    "libnccl-dev": "2.26.2-1+cuda12.8",
    "nccl-rdma-sharp-plugins": "2.7-1",
    "nccl-tests": "2.13.11-1",
    "opensm-ibsim": "1.0-1",
    # SHARP's aggregation manager, as DOCA-Host ships it (the sharp role's pin is 3.9.*).
    "sharp": "3.9.0-1",
    # NVIDIA's container toolkit library and CLI, which enroot's GPU hook runs.
    "libnvidia-container1": "1.17.1",
    "libnvidia-container-tools": "1.17.1",
}

# The containers' pieces that are files, not Python: enroot, its hook and mounts, the CLI of
# libnvidia-container, and the lab's pyxis (cluster_lab/data/containers/).
CONTAINERS_DATA = REPO_ROOT / "cluster_lab" / "data" / "containers"
# enroot comes as .debs from its GitHub release (not an apt repository): the lab serves them
# under its releases, at the version the enroot_pyxis role pins (cluster_lab/releases.py).
ENROOT_VERSION = "3.5.0"


class PackageBuildError(ClusterToolError):
    """dpkg-deb is missing or refused a package."""


@dataclass
class SimPackage:
    """One simulator package: what it is called, what it simulates, which files it carries."""

    name: str
    summary: str
    # Executables: path in the node -> simulated tool name (the dispatch key in sim.cli).
    tools: dict[str, str] = field(default_factory=dict)
    # Init scripts: service name -> the simulated daemon's executable (a tool in `tools`).
    services: dict[str, str] = field(default_factory=dict)
    # Plain files: path in the node -> content.
    files: dict[str, str] = field(default_factory=dict)
    # Executable files that are no simulator tool (shell): path in the node -> content.
    executables: dict[str, str] = field(default_factory=dict)
    carries_simulator: bool = False
    # One-shot boot scripts: init script name -> what `start` runs (enabled at install).
    boot_scripts: dict[str, str] = field(default_factory=dict)
    postinst: str = ""
    # Real Debian packages the vendor's package would bring along (in the lab repository).
    depends: tuple[str, ...] = ()
    # Packages it takes the place of (DCGM 4 over DCGM 3, which owns the same files).
    conflicts: tuple[str, ...] = ()
    # The name the simulators read its version under, when it is another OS's name for a
    # package they know (Ubuntu's nvidia-utils-550 is Debian's nvidia-driver-cuda).
    stands_for: str | None = None


# Where the package puts the binaries (nccl_tests_package_bin_dir); the nccl_tests role links
# them into /opt/nccl-tests/build, where the gate's job scripts run them.
NCCL_TESTS_DIR = "usr/bin"
_NCCL_TESTS = ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "alltoall_perf")

# nvidia-persistenced.service as Ubuntu's nvidia-compute-utils-<branch> package ships it.
PERSISTENCED_UNIT = """\
[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target
StopWhenUnneeded=true
Before=systemd-backlight@backlight:nvidia_0.service

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced
"""

# The unit the exporter's package ships; the dcgm_exporter role's drop-in replaces ExecStart.
DCGM_EXPORTER_UNIT = """\
[Unit]
Description=NVIDIA DCGM exporter
After=nvidia-dcgm.service

[Service]
ExecStart=/usr/bin/dcgm-exporter
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""

_INIT = """#!/bin/sh
### BEGIN INIT INFO
# Provides:          {service}
# Required-Start:    $remote_fs
# Required-Stop:     $remote_fs
# Default-Start:     2 3 4 5
# Default-Stop:      0 1 6
# Short-Description: {service} (cluster-tool lab simulator)
### END INIT INFO
# The lab's nodes run SysV init: start-stop-daemon keeps the pidfile the status check reads.
PIDFILE=/run/{service}.pid
ACTION="$1"
# A package that ships a systemd unit starts its daemon as systemd would: the unit's ExecStart
# as the drop-ins in /etc/systemd/system/<unit>.d/*.conf override it, in name order (an empty
# ExecStart= clears it), so a role's drop-in takes effect here as on a real node. Its User= and
# Group= (a missing user fails the start, as systemd's status=217/USER does), RuntimeDirectory=
# (made for the daemon's user, removed when it stops) and EnvironmentFile= (a leading `-`: may be
# missing) hold as well; `$NAME` in ExecStart splits into words, `${{NAME}}` stays one.
COMMAND={daemon}
RUN_USER=
RUN_GROUP=
RUNTIME_DIRS=
RUNTIME_MODE=0755
ENV_FILES=
UNIT=/lib/systemd/system/{service}.service
if [ -f "$UNIT" ]; then
  for f in "$UNIT" /etc/systemd/system/{service}.service.d/*.conf; do
    [ -f "$f" ] || continue
    while IFS= read -r line; do
      case "$line" in
        ExecStart=*) COMMAND="${{line#ExecStart=}}" ;;
        User=*) RUN_USER="${{line#User=}}" ;;
        Group=*) RUN_GROUP="${{line#Group=}}" ;;
        RuntimeDirectory=*) RUNTIME_DIRS="${{line#RuntimeDirectory=}}" ;;
        RuntimeDirectoryMode=*) RUNTIME_MODE="${{line#RuntimeDirectoryMode=}}" ;;
        EnvironmentFile=*) ENV_FILES="$ENV_FILES ${{line#EnvironmentFile=}}" ;;
      esac
    done < "$f"
  done
fi
set -f
for f in $ENV_FILES; do
  case "$f" in -*) f="${{f#-}}"; [ -r "$f" ] || continue ;; esac
  while IFS= read -r line; do
    case "$line" in
      [A-Za-z_]*=*)
        name="${{line%%=*}}"
        case "$name" in *[!A-Za-z0-9_]*) continue ;; esac
        value="${{line#*=}}"
        case "$value" in \\"*\\") value="${{value#\\"}}"; value="${{value%\\"}}" ;; esac
        export "$name=$value" ;;
    esac
  done < "$f"
done
# shellcheck disable=SC2086  # the command line splits into words, as systemd splits it
set -- $COMMAND
for word do
  shift
  case "$word" in
    \\$\\{{*\\}}|\\$[A-Za-z_]*)
      name="${{word#\\$}}"; name="${{name#\\{{}}"; name="${{name%\\}}}}"
      case "$name" in ''|*[!A-Za-z0-9_]*) set -- "$@" "$word"; continue ;; esac
      eval "value=\\${{$name-}}"
      # shellcheck disable=SC2086  # $NAME splits into words; ${{NAME}} is one
      case "$word" in \\$\\{{*) set -- "$@" "$value" ;; *) set -- "$@" $value ;; esac ;;
    *) set -- "$@" "$word" ;;
  esac
done
set +f
DAEMON="$1"
[ $# -gt 0 ] && shift
case "$ACTION" in
  start)
    CHUID=
    if [ -n "$RUN_USER" ]; then
      if ! id -u "$RUN_USER" >/dev/null 2>&1; then
        echo "{service}: User=$RUN_USER: no such user (systemd: status=217/USER)" >&2; exit 1
      fi
      CHUID="$RUN_USER${{RUN_GROUP:+:$RUN_GROUP}}"
    fi
    for d in $RUNTIME_DIRS; do
      mkdir -p "/run/$d" && chmod "$RUNTIME_MODE" "/run/$d" || exit 1
      [ -z "$CHUID" ] || chown "$CHUID" "/run/$d" || exit 1
    done
    start-stop-daemon --start --quiet --oknodo --background --make-pidfile \\
      --pidfile "$PIDFILE" ${{CHUID:+--chuid "$CHUID"}} --startas "$DAEMON" -- "$@" ;;
  stop)
    # --retry: wait until the daemon is gone (as systemd does), so a restart's new daemon
    # starts after the old one has finished stopping.
    start-stop-daemon --stop --quiet --retry 10 --pidfile "$PIDFILE" --remove-pidfile --oknodo
    rc=$?
    for d in $RUNTIME_DIRS; do rm -rf "/run/$d"; done
    exit $rc ;;
  restart|force-reload)
    "$0" stop; "$0" start ;;
  status)
    start-stop-daemon --status --pidfile "$PIDFILE"; rc=$?
    [ $rc -eq 0 ] && echo "{service} is running" || echo "{service} is not running"
    exit $rc ;;
  *)
    echo "Usage: $0 {{start|stop|restart|status}}" >&2; exit 3 ;;
esac
"""

_BOOT = """#!/bin/sh
### BEGIN INIT INFO
# Provides:          {name}
# Required-Start:    $remote_fs
# Required-Stop:
# Default-Start:     2 3 4 5
# Default-Stop:
# Short-Description: {name} (cluster-tool lab simulator, runs once at boot)
### END INIT INFO
case "$1" in
  start)
{body}    ;;
  stop|restart|force-reload|status) ;;
  *)
    echo "Usage: $0 {{start|stop|restart|status}}" >&2; exit 3 ;;
esac
"""

# What udev's coldplug (the PCI devices' modaliases) and systemd-modules-load do at every boot
# on a real node: the driver's modules load, then whatever /etc/modules-load.d/ names
# (nvidia_peermem in peermem mode). Loaded modules are gone after a reboot in the lab too.
_LOAD_MODULES_AT_BOOT = """    for m in nvidia nvidia_uvm nvidia_modeset; do
      /usr/local/sbin/modprobe "$m" || true
    done
    for f in /etc/modules /etc/modules-load.d/*.conf; do
      [ -f "$f" ] || continue
      sed -e 's/#.*//' "$f" | while read -r m _; do
        [ -n "$m" ] && { /usr/local/sbin/modprobe "$m" || true; }
      done
    done
"""

# The driver running when DOCA is installed is the inbox one udev loaded at boot: recorded for the
# simulated /sys/module (a tmpfs under /run: a reboot forgets it, and openibd then loads DOCA's).
_INBOX_MLX5_AT_INSTALL = """run="${LAB_RUN_DIR:-/run/cluster-tool-lab}"
[ -e "$run/mlx5_core" ] || { mkdir -p "$run" && echo inbox > "$run/mlx5_core"; }
"""

# The driver's DKMS build compiles nvidia-peermem against DOCA's ib_core when DOCA is installed
# (its /usr/src/ofa_kernel), else against the inbox one, which lacks the peer-memory API: recorded
# for the simulated modprobe, which then refuses nvidia_peermem as the real one does.
_PEERMEM_BUILD = f"""lib=/{LIB_DIR}
if [ -e "$lib/versions/doca-ofed" ]; then ib_core=doca; else ib_core=inbox; fi
echo "$ib_core" > "$lib/nvidia-peermem.ib_core"
"""

_WRAPPER = """#!/usr/bin/python3
# cluster-tool lab simulator of `{tool}`: answers from the lab's hardware model.
import os
import sys

# The simulator lives {depth} levels up, under {lib} (also when the package is unpacked
# somewhere else to look at it).
# realpath: the nccl_tests role runs us through links in /opt/nccl-tests/build.
root = os.path.dirname(os.path.realpath(__file__))
for _ in range({depth}):
    root = os.path.dirname(root)
sys.path.insert(0, os.path.join(root, "{lib}"))
from {pkg}.cli import main  # noqa: E402

sys.exit(main("{tool}", sys.argv[1:]))
"""

# The nccl-tests binaries: rank 0 of an `srun --mpi=pmix` step computes the run and prints it
# (cluster_lab/sim/nccl_tests.py); every other rank only needs to end as rank 0 says, which rank
# 0 leaves in the lab's steps folder (the same host folder in every node), as NCCL's ranks learn
# each other's fate over its bootstrap network. A Python interpreter for each of them would cost
# a 16-rank step 16 interpreter starts on the lab's CPUs for nothing. A rank that finds no word
# within a minute (an older lab without the folder, rank 0 gone) computes it the old way.
_PERF_WRAPPER = """#!/bin/sh
# cluster-tool lab simulator of `{tool}`: answers from the lab's hardware model.
if [ -n "${{PMIX_RANK:-}}" ] && [ "$PMIX_RANK" != 0 ] && [ -n "${{SLURM_JOB_ID:-}}" ] \\
        && [ -n "${{SLURM_STEP_ID:-}}" ]; then
    word="${{LAB_STEPS_DIR:-{steps}}}/$SLURM_JOB_ID.$SLURM_STEP_ID"
    waited=0
    while [ ! -s "$word" ] && [ "$waited" -lt 1200 ]; do
        sleep 0.05
        waited=$((waited + 1))
    done
    if [ -s "$word" ]; then
        read -r end < "$word"
        case "$end" in
            hang) exec sleep infinity ;;
            [0-9]|[0-9][0-9]|[0-9][0-9][0-9]) exit "$end" ;;
        esac
    fi
fi
# The simulator lives {strip} levels above this file's target (the nccl_tests role runs us
# through links in /opt/nccl-tests/build).
root=$(readlink -f "$0")
i=0
while [ "$i" -lt {strip} ]; do root=${{root%/*}}; i=$((i + 1)); done
run='import sys; sys.path.insert(0, sys.argv.pop(1)); from {pkg}.cli import main; \
sys.exit(main("{tool}", sys.argv[1:]))'
exec /usr/bin/python3 -c "$run" "$root/{lib}" "$@"
"""

_MODULES_README = """The NVIDIA kernel modules of the cluster-tool lab are simulated.

A lab node shares the host's kernel, so nothing can really be loaded, and /proc and /sys
are the host's. The convention (documented in cluster_lab/sim/README.md):
- /usr/local/sbin/modprobe loads a simulated module by recording it under
  /run/cluster-tool-lab/modules/ (a tmpfs: gone after a reboot, like a loaded module);
  other modules go to the real /usr/sbin/modprobe;
- /usr/local/sbin/lsmod lists the simulated modules that are loaded and that the lab's
  hardware model still has (a module-missing fault takes one away), then the kernel's;
- /usr/local/bin/dmesg shows the node's simulated kernel log (driver load lines, Xids);
- the loaded modules show in /proc/driver/nvidia/version and /sys/module/<module>/: the
  simulated tools bind-mount a tree kept under /run/cluster-tool-lab/kernel/ over
  /proc/driver and /sys/module in the node's own mount namespace, and the simulated
  nvidia-persistenced keeps it in step with the lab model.
"""


# The lab's subnet manager: the distribution's OpenSM (Debian's package, real binary) run against
# ibsim through the umad2sim preload, attached where the head's diags attach (the head's
# /etc/cluster-tool-lab/ibsim.env, written by `lab up`). It reads the opensm role's opensm.conf.
# Its unit is what the lab's init script runs (the role starts and enables it as `opensm_service`).
OPENSM_IBSIM_SCRIPT = """#!/bin/sh
# cluster-tool lab: OpenSM against the lab's fabric simulator.
set -e
. /etc/cluster-tool-lab/ibsim.env
export IBSIM_SERVER_NAME SIM_HOST
export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so
# umad2sim keeps a ./sys-<pid> tree in the working directory.
mkdir -p /var/cache/opensm
cd /var/cache/opensm
# The lab's differences: its 5 s sweep (a relinked cable is swept in within a test's patience)
# and a flushed log (readiness and tests read it). The rest is the opensm role's opensm.conf,
# which OpenSM reads from its default path.
exec /usr/sbin/opensm --sweep 5 --debug 2 --log_file /var/log/opensm.log
"""
OPENSM_IBSIM_UNIT = """\
[Unit]
Description=OpenSM against the cluster-tool lab's ibsim (umad2sim)
Documentation=man:opensm(8)

[Service]
ExecStart=/bin/sh /usr/lib/cluster-tool-lab/opensm-ibsim

[Install]
WantedBy=multi-user.target
"""


def kernel_release() -> str:
    """The kernel every lab node runs: the host's (`uname -r` in a node)."""
    return os.uname().release


def kernel_package_version(release: str) -> str:
    """A package version for the kernel `release` (`6.1.0-28-amd64` -> `6.1.0-1`)."""
    numbers = re.match(r"[0-9]+(?:\.[0-9]+)*", release)
    return f"{numbers.group(0) if numbers else '0'}-1"


_KERNEL_HEADERS_README = """The headers of the lab's kernel (the host's: every lab node shares it).

DKMS would build the NVIDIA open modules and DOCA's modules against
/usr/src/linux-headers-<release>; the lab's modules are simulated, so this package carries no
headers: it is here so that the roles install, and hold, the headers of the running kernel exactly
as on a real node.
"""


def kernel_headers_package(release: str) -> SimPackage:
    """linux-headers-<release>, as Debian and Ubuntu name the running kernel's headers."""
    return SimPackage(
        f"linux-headers-{release}",
        f"Header files for Linux {release} (simulated: the lab's kernel is the host's)",
        files={f"/usr/src/linux-headers-{release}/README.lab": _KERNEL_HEADERS_README},
    )


# SHARP's aggregation manager: a daemon that holds its place (the lab's switches aggregate nothing)
# and the script NVIDIA's SHARP deployment guide registers it with (`sharp_daemons_setup.sh -s -d
# sharp_am`: a systemd unit; here also the lab's init script that runs it).
SHARP_AM = """#!/bin/sh
# cluster-tool lab: SHARP's aggregation manager (simulated: it runs, and aggregates nothing).
while :; do sleep 3600; done
"""
SHARP_AM_UNIT = """[Unit]
Description=SHARP Aggregation Manager (sharp_am)
After=network.target

[Service]
ExecStart=/opt/mellanox/sharp/bin/sharp_am

[Install]
WantedBy=multi-user.target
"""
SHARP_DAEMONS_SETUP = """#!/bin/sh
# cluster-tool lab: sharp_daemons_setup.sh -s -d sharp_am registers the daemon as a service.
set -e
if [ "$1" != -s ] || [ "$2" != -d ] || [ "$3" != sharp_am ]; then
    echo "usage: $0 -s -d sharp_am" >&2
    exit 2
fi
install -m 0644 /opt/mellanox/sharp/share/sharp_am.service /etc/systemd/system/sharp_am.service
install -m 0755 /opt/mellanox/sharp/share/sharp_am.init /etc/init.d/sharp_am
"""


def packages_for(branch: str = DRIVER_BRANCH, kernel: str | None = None) -> list[SimPackage]:
    """Every simulator package (Debian's names) for driver `branch` and the running kernel."""
    driver_doc = "/usr/share/doc/cluster-tool-lab/MODULES"
    return [
        kernel_headers_package(kernel or kernel_release()),
        SimPackage(
            "nvidia-open-kernel-dkms",
            "NVIDIA open GPU kernel modules (simulated: modprobe/lsmod/dmesg shims)",
            tools={
                "usr/local/sbin/modprobe": "modprobe",
                "usr/local/sbin/lsmod": "lsmod",
                "usr/local/bin/dmesg": "dmesg",
                # The node's PCI bus (GPUs and HCAs with their PCIe links), before pciutils'.
                "usr/local/bin/lspci": "lspci",
            },
            files={driver_doc: _MODULES_README},
            carries_simulator=True,
            boot_scripts={"nvidia-kernel-modules": _LOAD_MODULES_AT_BOOT},
            # As udev would on real hardware, the modules load when the driver lands.
            postinst=_PEERMEM_BUILD + "/usr/local/sbin/modprobe nvidia || true\n"
            "/usr/local/sbin/modprobe nvidia_uvm || true\n"
            "/usr/local/sbin/modprobe nvidia_peermem || true\n",
        ),
        SimPackage(
            "nvidia-driver-cuda",
            "NVIDIA driver CUDA user space and nvidia-smi (simulated)",
            tools={"usr/bin/nvidia-smi": "nvidia-smi"},
            carries_simulator=True,
        ),
        SimPackage(
            "nvidia-persistenced",
            "NVIDIA persistence daemon (simulated: keeps the module view in step with the lab)",
            tools={"usr/bin/nvidia-persistenced": "nvidia-persistenced"},
            services={"nvidia-persistenced": "/usr/bin/nvidia-persistenced"},
            # Ubuntu's unit (nvidia-compute-utils-<branch>): persistence mode off until a
            # drop-in says otherwise.
            files={"/lib/systemd/system/nvidia-persistenced.service": PERSISTENCED_UNIT},
            carries_simulator=True,
        ),
        SimPackage(
            f"nvidia-fabricmanager-{branch}",
            "NVIDIA NVSwitch fabric manager (simulated)",
            tools={"usr/bin/nv-fabricmanager": "nv-fabricmanager"},
            services={"nvidia-fabricmanager": "/usr/bin/nv-fabricmanager"},
            carries_simulator=True,
        ),
        SimPackage(
            f"libnvidia-nscq-{branch}",
            "NVSwitch configuration and query library (simulated: no payload)",
        ),
        SimPackage(
            "datacenter-gpu-manager",
            "NVIDIA DCGM: dcgmi diag (simulated) and nv-hostengine",
            tools={"usr/bin/dcgmi": "dcgmi", "usr/bin/nv-hostengine": "nv-hostengine"},
            services={"nvidia-dcgm": "/usr/bin/nv-hostengine"},
            carries_simulator=True,
        ),
        SimPackage(
            "datacenter-gpu-manager-4-core",
            "NVIDIA DCGM 4: dcgmi diag (simulated) and nv-hostengine",
            tools={"usr/bin/dcgmi": "dcgmi", "usr/bin/nv-hostengine": "nv-hostengine"},
            services={"nvidia-dcgm": "/usr/bin/nv-hostengine"},
            carries_simulator=True,
            conflicts=("datacenter-gpu-manager",),
        ),
        SimPackage(
            "datacenter-gpu-manager-4-cuda12",
            "NVIDIA DCGM 4 for CUDA 12 drivers (simulated: no payload)",
        ),
        SimPackage(
            "dcgm-exporter",
            "NVIDIA DCGM exporter (simulated: the lab model's DCGM fields on :9400)",
            tools={"usr/bin/dcgm-exporter": "dcgm-exporter"},
            services={"dcgm-exporter": "/usr/bin/dcgm-exporter"},
            # A packaged exporter is a systemd service; the lab's init script runs its
            # ExecStart as the role's drop-in sets it (--collectors, --address).
            files={"/lib/systemd/system/dcgm-exporter.service": DCGM_EXPORTER_UNIT},
            carries_simulator=True,
        ),
        SimPackage(
            "doca-ofed",
            "NVIDIA DOCA-OFED (simulated: the HCAs come from the lab's sysfs tree)",
            # openibd loads DOCA's mlx5_core/ib_core in place of the inbox stack, which stays
            # loaded after the install until openibd restarts or the node reboots; modinfo
            # answers for DOCA's modules (what modprobe would load now).
            tools={
                "usr/sbin/openibd-lab": "openibd",
                "usr/local/sbin/modinfo": "modinfo",
                # DOCA's ofed-scripts ship ibdev2netdev (the real one reads sysfs links the
                # lab's tree cannot hold; this one reads the model the tree is written from).
                "usr/bin/ibdev2netdev": "ibdev2netdev",
            },
            services={"openibd": "/usr/sbin/openibd-lab"},
            carries_simulator=True,
            postinst=_INBOX_MLX5_AT_INSTALL,
            # DOCA's profile brings its builds of these (the lab has Debian's) and MFT.
            depends=("infiniband-diags", "rdma-core", "ibverbs-utils", "mft"),
        ),
        SimPackage(
            "mft",
            "NVIDIA Firmware Tools: mlxlink (simulated from the lab's cables)",
            tools={"usr/bin/mlxlink": "mlxlink"},
            carries_simulator=True,
        ),
        SimPackage("libnccl2", "NCCL runtime (simulated: nccl-tests carry the model)"),
        SimPackage("libnccl-dev", "NCCL headers (simulated: no payload)"),
        SimPackage("nccl-rdma-sharp-plugins", "NCCL RDMA/SHARP network plugin (simulated)"),
        SimPackage(
            "nccl-tests",
            "nccl-tests benchmarks (simulated from the lab's hardware model)",
            tools={f"{NCCL_TESTS_DIR}/{t}": t for t in _NCCL_TESTS},
            carries_simulator=True,
        ),
        SimPackage(
            "opensm-ibsim",
            "OpenSM against the lab's ibsim (the distribution's opensm, umad2sim preload)",
            # The unit's ExecStart is what the init script runs.
            services={"opensm-ibsim": "/usr/sbin/opensm"},
            files={
                "/usr/lib/cluster-tool-lab/opensm-ibsim": OPENSM_IBSIM_SCRIPT,
                "/lib/systemd/system/opensm-ibsim.service": OPENSM_IBSIM_UNIT,
            },
            depends=("opensm", "ibsim-utils"),
        ),
        SimPackage(
            "sharp",
            "NVIDIA SHARP: the aggregation manager and its service setup (simulated)",
            files={
                "/opt/mellanox/sharp/share/sharp_am.service": SHARP_AM_UNIT,
            },
            executables={
                "/opt/mellanox/sharp/bin/sharp_am": SHARP_AM,
                "/opt/mellanox/sharp/sbin/sharp_daemons_setup.sh": SHARP_DAEMONS_SETUP,
                "/opt/mellanox/sharp/share/sharp_am.init": _INIT.format(
                    service="sharp_am", daemon="/opt/mellanox/sharp/bin/sharp_am"
                ),
            },
        ),
        SimPackage(
            "libnvidia-container1",
            "NVIDIA container runtime library (simulated: no payload)",
        ),
        SimPackage(
            "libnvidia-container-tools",
            "NVIDIA container runtime CLI (simulated: brings a node's GPUs into a container)",
            executables={"/usr/bin/nvidia-container-cli": _data("nvidia-container-cli")},
            depends=("libnvidia-container1",),
        ),
    ]


def init_script(service: str, daemon: str) -> str:
    """The lab's /etc/init.d script of `service`: runs its systemd unit as systemd would (the
    unit's ExecStart, User, Group, RuntimeDirectory, EnvironmentFile), `daemon` without one."""
    return _INIT.format(service=service, daemon=daemon)


def _data(name: str) -> str:
    return (CONTAINERS_DATA / name).read_text()


def enroot_packages() -> list[SimPackage]:
    """enroot and enroot+caps as its release ships them: the runtime with its standard mounts
    and GPU hook, and the flavour that adds capabilities (here: nothing more)."""
    return [
        SimPackage(
            "enroot",
            "enroot container runtime (simulated: chroot containers from the lab's registry)",
            executables={
                "/usr/bin/enroot": _data("enroot"),
                "/etc/enroot/hooks.d/98-nvidia.sh": _data("98-nvidia.sh"),
                # enroot's extra hooks, kept apart and off until an administrator enables them.
                "/usr/share/enroot/hooks.d/50-slurm-pmi.sh": _data("50-slurm-pmi.sh"),
                "/usr/share/enroot/hooks.d/50-slurm-pytorch.sh": _data("50-slurm-pytorch.sh"),
            },
            files={"/etc/enroot/mounts.d/10-system.fstab": _data("10-system.fstab")},
            depends=("curl",),
        ),
        SimPackage(
            "enroot+caps",
            "enroot's capabilities flavour (simulated: the lab runs containers as root)",
            depends=("enroot",),
        ),
    ]


def _control(pkg: SimPackage, version: str) -> str:
    return (
        f"Package: {pkg.name}\n"
        f"Version: {version}\n"
        "Architecture: amd64\n"
        "Maintainer: cluster-tool lab <lab@cluster-tool.invalid>\n"
        f"Depends: {', '.join(('python3', *pkg.depends))}\n"
        + (
            f"Conflicts: {', '.join(pkg.conflicts)}\nReplaces: {', '.join(pkg.conflicts)}\n"
            if pkg.conflicts
            else ""
        )
        + "Section: misc\n"
        "Priority: optional\n"
        f"Description: {pkg.summary}\n"
        " Built by the cluster-tool lab under the vendor's name and version; the tools\n"
        " answer from the lab's hardware model at /run/lab-model/model.json.\n"
    )


def _vendor(root: Path, package: str) -> None:
    """Copy the simulator modules (stdlib only) into the payload as package `labsim`, in a
    directory of the package's own (dpkg refuses two packages owning one file)."""
    dest = root / LIB_DIR / package / VENDORED_AS
    dest.mkdir(parents=True, exist_ok=True)
    for src in sorted(SIM_SOURCE.glob("*.py")):
        if src.name not in HOST_ONLY:
            shutil.copy2(src, dest / src.name)


def _write(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def build_package(pkg: SimPackage, version: str, dest_dir: Path, work: Path) -> Path:
    root = work / pkg.name
    (root / "DEBIAN").mkdir(parents=True)
    _write(root / "DEBIAN" / "control", _control(pkg, version), 0o644)
    # The simulated tools report the versions of what is installed (nvidia-smi's driver
    # version is the driver package's, as the roles' version checks expect).
    _write(root / LIB_DIR / "versions" / (pkg.stands_for or pkg.name), version + "\n", 0o644)
    if pkg.carries_simulator:
        _vendor(root, pkg.name)
    for path, tool in pkg.tools.items():
        depth = path.count("/")
        lib = f"{LIB_DIR}/{pkg.name}"
        wrapper = _PERF_WRAPPER if tool in _NCCL_TESTS else _WRAPPER
        text = wrapper.format(
            tool=tool, lib=lib, pkg=VENDORED_AS, depth=depth, strip=depth + 1, steps=STEPS_DIR
        )
        _write(root / path, text, 0o755)
    for service, daemon in pkg.services.items():
        _write(
            root / "etc" / "init.d" / service, _INIT.format(service=service, daemon=daemon), 0o755
        )
    for path, text in pkg.files.items():
        _write(root / path.lstrip("/"), text, 0o644)
    for path, text in pkg.executables.items():
        _write(root / path.lstrip("/"), text.replace("@VERSION@", version.split("-")[0]), 0o755)
    postinst = pkg.postinst
    for name, body in pkg.boot_scripts.items():
        _write(root / "etc" / "init.d" / name, _BOOT.format(name=name, body=body), 0o755)
        postinst = f"update-rc.d {name} defaults >/dev/null 2>&1 || true\n" + postinst
    if pkg.carries_simulator:
        # Byte-compile once as root: jobs run the tools as users who cannot write the cache.
        lib = f"/{LIB_DIR}/{pkg.name}/{VENDORED_AS}"
        postinst = f"python3 -m compileall -q {lib} >/dev/null || true\n" + postinst
        _write(root / "DEBIAN" / "prerm", f"#!/bin/sh\nset -e\nrm -rf {lib}/__pycache__\n", 0o755)
    if postinst:
        _write(root / "DEBIAN" / "postinst", "#!/bin/sh\nset -e\n" + postinst, 0o755)
    if not any(p.is_file() for p in root.rglob("*") if "DEBIAN" not in p.parts):
        # dpkg accepts an empty package, but a file list tells an operator what this is.
        _write(root / "usr" / "share" / "doc" / pkg.name / "README.lab", pkg.summary + "\n", 0o644)
    return pack_tree(root, dest_dir / f"{pkg.name}_{version.split(':')[-1]}_amd64.deb", work)


def pack_tree(root: Path, out: Path, work: Path) -> Path:
    """`root` (a package tree with its DEBIAN/) as the .deb `out`, reproducibly: fixed times and
    root ownership, written only when its bytes change."""
    dpkg_deb = shutil.which("dpkg-deb")
    if dpkg_deb is None:
        raise PackageBuildError("dpkg-deb not found: install dpkg to build the lab's packages")
    # Reproducible: the same sources give the same bytes, so a rebuild under a running lab
    # leaves its repository index valid (apt refuses a .deb whose size or hash changed).
    for dirpath, _, files in os.walk(root):
        for name in files:
            # A link's own time (a link may point where nothing is on this host).
            os.utime(os.path.join(dirpath, name), (BUILD_EPOCH, BUILD_EPOCH), follow_symlinks=False)
        os.utime(dirpath, (BUILD_EPOCH, BUILD_EPOCH))
    built = work / out.name
    done = subprocess.run(
        [dpkg_deb, "--root-owner-group", "-Zgzip", "--build", str(root), str(built)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SOURCE_DATE_EPOCH": str(BUILD_EPOCH)},
    )
    if done.returncode != 0:
        raise PackageBuildError(f"dpkg-deb failed for {root.name}: {done.stderr.strip()}")
    if not (out.is_file() and out.read_bytes() == built.read_bytes()):
        # Atomic: a node fetching from the repository never sees half a package.
        tmp = out.with_name(f".{out.name}.tmp")
        shutil.copyfile(built, tmp)
        os.replace(tmp, out)
    return out


def _concrete(pattern: str) -> str:
    """A version that satisfies an apt pin pattern ("2.9.1-*" -> "2.9.1-1")."""
    return pattern.replace("*", "1")


def role_pins(roles_dir: Path) -> dict[str, str]:
    """Package name -> the version pattern the roles pin on Debian 12 (from their defaults)."""
    import yaml

    def defaults(role: str) -> dict[str, Any]:
        path = roles_dir / role / "defaults" / "main.yml"
        data = yaml.safe_load(path.read_text()) if path.is_file() else None
        return data or {}

    pins: dict[str, str] = {}
    driver = defaults("nvidia_driver")
    if driver:
        branch, version = str(driver["nvidia_driver_branch"]), str(driver["nvidia_driver_version"])
        for name in (
            "nvidia-open-kernel-dkms",
            "nvidia-driver-cuda",
            "nvidia-persistenced",
            f"nvidia-fabricmanager-{branch}",
            f"libnvidia-nscq-{branch}",
        ):
            pins[name] = f"{version}-*"
    dcgm = defaults("dcgm")
    if dcgm and str(dcgm.get("dcgm_major", 3)) == "3":
        pins["datacenter-gpu-manager"] = f"1:{dcgm['dcgm_version']}"
    elif dcgm and str(dcgm.get("dcgm_major")) == "4":
        for name in ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12"):
            pins[name] = f"1:{dcgm['dcgm_version']}-*"
    exporter = defaults("dcgm_exporter")
    if exporter:
        pins["dcgm-exporter"] = f"{exporter['dcgm_exporter_version']}-*"
    doca = defaults("doca_ofed")
    if doca:
        pins["doca-ofed"] = f"{doca['doca_ofed_version']}-*"
    nccl = defaults("nccl")
    if nccl:
        pins["libnccl2"] = pins["libnccl-dev"] = str(nccl["nccl_version"])
        pins["nccl-rdma-sharp-plugins"] = str(nccl.get("nccl_plugin_version", "2.7-*"))
    tests = defaults("nccl_tests")
    if tests:
        pins["nccl-tests"] = str(tests["nccl_tests_package_version"])
    containers = defaults("enroot_pyxis")
    if containers.get("enroot_pyxis_container_version"):
        for name in containers.get("enroot_pyxis_container_packages") or []:
            pins[str(name)] = str(containers["enroot_pyxis_container_version"])
    return pins


def build_sim_packages(dest_dir: Path, versions: Mapping[str, str] | None = None) -> list[Path]:
    """Build every simulator .deb into `dest_dir` (the lab's `repo/sim/`). Versions: what the
    roles in this checkout pin, then `versions` (package name -> version) on top. Returns the
    files."""
    pinned = {name: _concrete(p) for name, p in role_pins(REPO_ROOT / "roles").items()}
    chosen = {**DEFAULT_VERSIONS, **pinned, **(versions or {})}
    # The driver branch names two packages: the caller's choice, else the roles', else ours.
    branch = DRIVER_BRANCH
    for source in (pinned, versions or {}):
        for name in source:
            if name.startswith("nvidia-fabricmanager-"):
                branch = name.rsplit("-", 1)[1]
    packages = packages_for(branch)
    kernel = kernel_release()
    chosen.setdefault(f"linux-headers-{kernel}", kernel_package_version(kernel))
    chosen = {
        n: v for n, v in chosen.items() if n in {p.name for p in packages} or n in (versions or {})
    }
    unknown = set(chosen) - {p.name for p in packages}
    if unknown:
        raise PackageBuildError(f"no simulator for package(s): {', '.join(sorted(unknown))}")
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    built = []
    with tempfile.TemporaryDirectory(prefix="lab-sim-debs-") as tmp:
        for pkg in packages:
            built.append(build_package(pkg, chosen[pkg.name], dest_dir, Path(tmp)))
    return built


def publish_to_lab_repo(config: LabConfig, versions: Mapping[str, str] | None = None) -> list[Path]:
    """Build the simulator packages into the lab repository's `sim/` and re-index it."""
    from cluster_lab import repo

    built = build_sim_packages(repo.sim_debs_dir(config), versions)
    repo.reindex(config)
    return built
