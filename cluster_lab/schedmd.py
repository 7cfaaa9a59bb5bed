"""SchedMD's Slurm packages for the lab: `slurm-smd`, `slurm-smd-client`, `slurm-smd-slurmd`,
`slurm-smd-slurmctld`, `slurm-smd-slurmdbd` and `slurm-smd-dev`, laid out as a site's `debuild`
of Slurm's release tarball lays them out (its debian/control and debian/rules), made from the
Debian Slurm binaries the lab already serves.

Where a SchedMD build differs from the distribution's, and where that bites, the lab's packages
differ the same way:
- no maintainer scripts: no `slurm` user (Debian's slurm-wlm-basic-plugins preinst creates it),
  no alternatives (the daemons are /usr/sbin/slurmd, slurmstepd, slurmctld themselves), no
  service enabled or started at install;
- units as SchedMD's: slurmctld and slurmdbd run `User=slurm`/`Group=slurm` with a
  `RuntimeDirectory` of their own, slurmd as root with `RuntimeDirectory=slurm`
  (SchedMD/slurm etc/*.service.in since 23.11). Their `ExecStart` is the 22.05 form
  (`-D -s $OPTIONS`, etc/*.service.in of slurm-22-05-8-1), the release of the binaries inside;
- every library and plugin in `slurm-smd` (the mysql accounting plugin too), the headers in
  `slurm-smd-dev`, which conflicts with the distribution's libslurm-dev;
- version `<release>-1`, as SchedMD's debian/changelog numbers its builds (24.05.5-1).

The binaries keep the paths they were built with (plugins in /usr/lib/x86_64-linux-gnu/slurm-wlm,
Debian's PluginDir); a real SchedMD build keeps them in .../slurm. Nodes have no systemd, so each
daemon package also carries the lab's init script, which runs the unit as systemd would
(cluster_lab/sim/packages.py).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cluster_lab.config import LabConfig
from cluster_lab.host import LabError
from cluster_lab.repo import schedmd_debs_dir
from cluster_lab.sim.packages import init_script, pack_tree

# The Debian packages (in the lab's package cache) whose files the SchedMD packages carry.
DEBIAN_SOURCES = (
    "slurm-wlm-basic-plugins",
    "slurm-wlm-mysql-plugin",
    "libslurm38",
    "libslurm-dev",
    "slurm-client",
    "slurmd",
    "slurmctld",
    "slurmdbd",
)
# What SchedMD's debian/control conflicts with: the distribution's packages of the same files.
_CONFLICTS = {
    "slurm-smd": (
        "slurm-wlm, slurm-wlm-basic-plugins, slurm-wlm-mysql-plugin, slurm-wlm-plugins, libslurm38"
    ),
    "slurm-smd-client": "slurm-client",
    "slurm-smd-dev": "libslurm-dev",
    "slurm-smd-slurmd": "slurmd",
    "slurm-smd-slurmctld": "slurmctld",
    "slurm-smd-slurmdbd": "slurmdbd",
}

_UNIT = """\
[Unit]
Description={description}
After=network-online.target remote-fs.target munge.service{after}
Wants=network-online.target
ConditionPathExists=/etc/slurm/{conf}

[Service]
Type=simple
EnvironmentFile=-/etc/default/{daemon}
{user}RuntimeDirectory={runtime}
RuntimeDirectoryMode=0755
ExecStart=/usr/sbin/{daemon} -D -s ${option}
ExecReload=/bin/kill -HUP $MAINPID
LimitNOFILE=131072
LimitMEMLOCK=infinity
{extra}
[Install]
WantedBy=multi-user.target
"""


@dataclass
class _Package:
    name: str
    description: str
    depends: list[str] = field(default_factory=list)
    # Where each file of the payload comes from: path in the package -> path in the Debian tree.
    files: dict[str, str] = field(default_factory=dict)
    dirs: tuple[str, ...] = ()
    text: dict[str, str] = field(default_factory=dict)
    executables: dict[str, str] = field(default_factory=dict)


def release_of(debian_version: str) -> str:
    """`22.05.8-4+deb12u3` -> `22.05.8-1`: the release, as SchedMD numbers its first build."""
    return debian_version.split(":")[-1].split("-")[0] + "-1"


def _unit(daemon: str, user: bool, extra: str = "") -> str:
    return _UNIT.format(
        description={
            "slurmd": "Slurm node daemon",
            "slurmctld": "Slurm controller daemon",
            "slurmdbd": "Slurm DBD accounting daemon",
        }[daemon],
        after=" mariadb.service" if daemon == "slurmdbd" else "",
        conf="slurmdbd.conf" if daemon == "slurmdbd" else "slurm.conf",
        daemon=daemon,
        user="User=slurm\nGroup=slurm\n" if user else "",
        runtime="slurm" if daemon == "slurmd" else daemon,
        option=f"{daemon.upper()}_OPTIONS",
        extra=extra,
    )


def _external_depends(control_depends: str) -> list[str]:
    """A Debian package's dependencies less the Slurm packages the SchedMD ones replace."""
    out = []
    for item in control_depends.split(","):
        item = item.strip()
        name = item.split()[0] if item else ""
        if not name or name in DEBIAN_SOURCES or name in ("slurm-wlm", "ucf", "adduser"):
            continue
        out.append(item)
    return out


def _debian_debs(cache_debs: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for name in DEBIAN_SOURCES:
        debs = sorted(cache_debs.glob(f"{name}_*_amd64.deb"))
        if not debs:
            raise LabError(f"{name} is not in the lab's package cache ({cache_debs}): lab up again")
        found[name] = debs[-1]
    return found


def _field(deb: Path, name: str) -> str:
    return subprocess.run(
        ["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True
    ).stdout.strip()


def _plan(tree: Path, depends: dict[str, list[str]]) -> list[_Package]:
    """The SchedMD package split (debian/rules: every file under /usr/lib/*/ but static and
    libtool archives in slurm-smd, /usr/include/slurm and those archives in slurm-smd-dev)."""
    lib = "usr/lib/x86_64-linux-gnu"
    libs = sorted(
        str(p.relative_to(tree))
        for p in (tree / lib).rglob("*")
        if (p.is_file() or p.is_symlink()) and not p.name.endswith((".a", ".la"))
    )
    dev = sorted(str(p.relative_to(tree)) for p in (tree / "usr/include/slurm").rglob("*.h"))
    dev += sorted(str(p.relative_to(tree)) for p in (tree / lib).glob("libslurm.*a") if p.is_file())
    clients = sorted(str(p.relative_to(tree)) for p in (tree / "usr/bin").iterdir())

    def of(*names: str) -> list[str]:
        # What the Debian packages of these files need besides Slurm, and munge (debian/control).
        return sorted({*(d for name in names for d in depends[name]), "munge"})

    return [
        _Package(
            "slurm-smd",
            "Slurm Workload Manager (libraries and plugins)",
            depends=of("slurm-wlm-basic-plugins", "slurm-wlm-mysql-plugin", "libslurm38"),
            files={p: p for p in libs},
            dirs=("etc/slurm",),
        ),
        _Package(
            "slurm-smd-client",
            "Slurm Workload Manager client commands",
            depends=of("slurm-client"),
            files={p: p for p in clients},
        ),
        _Package(
            "slurm-smd-dev",
            "Development package for Slurm-smd (headers, static library)",
            depends=["munge"],
            files={p: p for p in dev},
        ),
        _Package(
            "slurm-smd-slurmd",
            "Slurm compute node daemon",
            depends=of("slurmd"),
            files={
                "usr/sbin/slurmd": "usr/sbin/slurmd-wlm",
                "usr/sbin/slurmstepd": "usr/sbin/slurmstepd-wlm",
            },
            dirs=("etc/slurm", "var/log/slurm"),
            text={
                "lib/systemd/system/slurmd.service": _unit(
                    "slurmd", user=False, extra="KillMode=process\nDelegate=yes\n"
                ),
                "etc/default/slurmd": '#SLURMD_OPTIONS=""\n',
            },
            executables={"etc/init.d/slurmd": init_script("slurmd", "/usr/sbin/slurmd")},
        ),
        _Package(
            "slurm-smd-slurmctld",
            "Slurm controller daemon",
            depends=of("slurmctld"),
            files={"usr/sbin/slurmctld": "usr/sbin/slurmctld-wlm"},
            dirs=("etc/slurm", "var/lib/slurm/slurmctld", "var/log/slurm"),
            text={
                "lib/systemd/system/slurmctld.service": _unit("slurmctld", user=True),
                "etc/default/slurmctld": '#SLURMCTLD_OPTIONS=""\n',
            },
            executables={"etc/init.d/slurmctld": init_script("slurmctld", "/usr/sbin/slurmctld")},
        ),
        _Package(
            "slurm-smd-slurmdbd",
            "Slurm database daemon",
            depends=of("slurmdbd"),
            files={"usr/sbin/slurmdbd": "usr/sbin/slurmdbd"},
            dirs=("etc/slurm", "var/log/slurm"),
            text={
                "lib/systemd/system/slurmdbd.service": _unit("slurmdbd", user=True),
                "etc/default/slurmdbd": '#SLURMDBD_OPTIONS=""\n',
            },
            executables={"etc/init.d/slurmdbd": init_script("slurmdbd", "/usr/sbin/slurmdbd")},
        ),
    ]


def _control(pkg: _Package, version: str) -> str:
    depends = list(pkg.depends)
    if pkg.name != "slurm-smd":
        depends.insert(0, f"slurm-smd (= {version})")
    return (
        f"Package: {pkg.name}\n"
        f"Version: {version}\n"
        "Architecture: amd64\n"
        "Maintainer: cluster-tool lab <lab@cluster-tool.invalid>\n"
        f"Depends: {', '.join(depends)}\n"
        f"Conflicts: {_CONFLICTS[pkg.name]}\n"
        "Section: admin\n"
        "Priority: optional\n"
        "Homepage: https://slurm.schedmd.com\n"
        f"Description: {pkg.description}\n"
        " Laid out as SchedMD's debian/ packaging lays out a build of the release tarball\n"
        " (no maintainer scripts, units with User=slurm), by the cluster-tool lab from\n"
        " Debian's binaries of the same release.\n"
    )


def build_schedmd_packages(cache_debs: Path, dest_dir: Path) -> list[Path]:
    """Every slurm-smd package into `dest_dir`, built from the Debian Slurm .debs in
    `cache_debs`; reproducible, so a rebuild under a running lab changes no byte."""
    sources = _debian_debs(cache_debs)
    version = release_of(_field(sources["slurmd"], "Version"))
    depends = {name: _external_depends(_field(deb, "Depends")) for name, deb in sources.items()}
    dest_dir.mkdir(parents=True, exist_ok=True)
    built: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="lab-schedmd-") as tmp:
        work = Path(tmp)
        tree = work / "debian"
        for deb in sources.values():
            subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
        for pkg in _plan(tree, depends):
            root = work / pkg.name
            (root / "DEBIAN").mkdir(parents=True)
            (root / "DEBIAN" / "control").write_text(_control(pkg, version))
            for dest, src in pkg.files.items():
                target, origin = root / dest, tree / src
                target.parent.mkdir(parents=True, exist_ok=True)
                if origin.is_symlink():
                    target.symlink_to(origin.readlink())
                else:
                    shutil.copy2(origin, target)
            for folder in pkg.dirs:
                (root / folder).mkdir(parents=True, exist_ok=True)
            for dest, content in {**pkg.text, **pkg.executables}.items():
                target = root / dest
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content)
                target.chmod(0o755 if dest in pkg.executables else 0o644)
            built.append(pack_tree(root, dest_dir / f"{pkg.name}_{version}_amd64.deb", work))
    return built


def publish_schedmd(config: LabConfig) -> list[Path]:
    """SchedMD's Slurm packages, made from the cached Debian Slurm, into the lab repository's
    `schedmd/` (indexed with the rest: the lab's inventory points the slurm role's site
    repository at the lab's)."""
    return build_schedmd_packages(config.cache_repo_dir / "debian", schedmd_debs_dir(config))
