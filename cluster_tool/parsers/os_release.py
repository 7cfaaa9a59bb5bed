"""`/etc/os-release` (freedesktop.org's os-release(5): one `KEY=value` per line, the value
quoted or not, `#` comments): which OS a host runs, for the preflight to hold to the spec's
`os` before Ansible starts."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from cluster_tool.errors import ParseError
from cluster_tool.parsers.base import parser

_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)=(.*)$")
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
        try:
            # The format is shell-compatible quoting: "Ubuntu 22.04.2 LTS", 'x', or bare words.
            words = shlex.split(raw) if raw else [""]
        except ValueError as exc:
            raise ParseError(f"unbalanced quotes ({exc})", line_no=no, line=line) from None
        values[key] = " ".join(words)
    if not values.get("ID"):
        raise ParseError("no ID= line: not an os-release file")
    return OsRelease(values["ID"].lower(), values.get("VERSION_ID"), values.get("PRETTY_NAME"))
