"""`/etc/os-release` (freedesktop.org's os-release(5): one `KEY=value` per line, the value
quoted or not, `#` comments): which OS a host runs, for the preflight to hold to the spec's
`os` before Ansible starts."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster_tool.errors import ParseError
from cluster_tool.parsers.base import parser

_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)=(.*)$")
_VALUE = re.compile(r'"((?:[^"\\]|\\.)*+)"|\'([^\']*+)\'|([^"\']*+)')
_ESCAPE = re.compile(r"\\(.)")
# The spec's OS names (spec.models.OsName) by os-release's ID and VERSION_ID.
_SPEC_NAMES = {
    ("debian", "12"): "debian12",
    ("ubuntu", "22.04"): "ubuntu2204",
    ("ubuntu", "24.04"): "ubuntu2404",
}


@dataclass(frozen=True)
class OsRelease:
    """What a host says it runs: `id` (`ubuntu`, `debian`), `version_id` (`22.04`, `12`) and
    the name a person reads (`Ubuntu 22.04.2 LTS`)."""

    id: str
    version_id: str | None
    pretty_name: str | None

    @property
    def spec_name(self) -> str | None:
        """The spec's name for this OS (`ubuntu2204`), None for one the tool does not install."""
        return _SPEC_NAMES.get((self.id, self.version_id or ""))

    def shown(self) -> str:
        return self.pretty_name or f"{self.id} {self.version_id or ''}".strip()


@parser("os-release", "/etc/os-release: the OS a host runs (ID, VERSION_ID, PRETTY_NAME).")
def parse_os_release(text: str) -> OsRelease:
    """The OS `/etc/os-release` names; ParseError naming a line that is not `KEY=value`, or when
    there is no ID."""
    values: dict[str, str] = {}
    for no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _LINE.match(stripped)
        if match is None:
            raise ParseError("expected KEY=value", line_no=no, line=line)
        key, raw = match.groups()
        # os-release(5): a value in double quotes (with `\"`, `\\`, `\$`, `\``
        # escapes), in single quotes, or bare. Read in one pass: shlex grows its token a
        # character at a time, quadratic on a long value.
        value = _VALUE.fullmatch(raw)
        if value is None:
            raise ParseError("unbalanced quotes", line_no=no, line=line)
        double, single, bare = value.groups()
        if double is not None:
            values[key] = _ESCAPE.sub(r"\1", double)
        else:
            values[key] = single if single is not None else bare.strip()
    if not values.get("ID"):
        raise ParseError("no ID= line: not an os-release file")
    return OsRelease(values["ID"].lower(), values.get("VERSION_ID"), values.get("PRETTY_NAME"))
