"""The version probe's output (cluster_tool/probes/versions.py): tagged lines, one per thing the
node reported (`kernel V`, `module NAME V`, `fabricmanager V`, `package NAME V`,
`hca DEVICE HCA_TYPE FIRMWARE PSID`, `pyxis_slurm V`: the Slurm the pyxis plugin was built
against), read into what runs per matrix component."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cluster_tool.errors import ParseError


@dataclass(frozen=True)
class HcaLine:
    """One RDMA device as sysfs describes it ("-" where a file was missing: None)."""

    device: str
    hca_type: str | None
    firmware: str
    psid: str | None


@dataclass(frozen=True)
class VersionLines:
    """Matrix component -> version, the loaded NVIDIA driver, and the RDMA devices."""

    nvidia_driver: str | None = None
    facts: dict[str, str] = field(default_factory=dict)
    hcas: tuple[HcaLine, ...] = ()


_LINE = re.compile(r"^(kernel|module|fabricmanager|package|hca|pyxis_slurm) +(\S.*)$")
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


def parse_versions(text: str) -> VersionLines:
    """The version probe's output; ParseError naming the line that is none of its forms."""
    facts: dict[str, str] = {}
    hcas: list[HcaLine] = []
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
        elif tag == "pyxis_slurm" and len(rest) == 1:
            facts["pyxis_slurm"] = rest[0]
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
            hcas.append(
                HcaLine(
                    device,
                    None if hca_type == "-" else hca_type,
                    firmware,
                    None if psid == "-" else psid,
                )
            )
        else:
            raise ParseError(f"versions: line {number} has the wrong number of fields", line=line)
    # The daemon's own answer wins; the package stands in where the daemon was not asked.
    if "fabricmanager" not in facts and "fabricmanager_package" in facts:
        facts["fabricmanager"] = facts["fabricmanager_package"]
    facts.pop("fabricmanager_package", None)
    return VersionLines(driver, facts, tuple(hcas))
