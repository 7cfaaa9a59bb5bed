"""The last check before a rendered file is written: every value, as the text it became, against
the grammar of the file it lands in (Slurm conf, chrony, nccl.conf, shell, YAML, systemd).

Spec types are the first line, and a type is only as narrow as its own grammar (Python's
`IPv6Address` took `fe80::1%eth0\\nserver 203.0.113.66 iburst` as a scope id). So whatever type
a value came through, its text is checked here where it is written: a line break, a comment
start or the start of another directive where that file would read one is refused. The guards
are pure; `cluster_tool.render.engine` applies them to every value its templates write and to
the variables the roles write into chrony.conf, slurm.conf and systemd units.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator
from typing import Any

import yaml

__all__ = [
    "FORMATS",
    "ROLE_DESTINATIONS",
    "UnsafeValue",
    "check",
    "check_role_variables",
    "format_of",
]


class UnsafeValue(ValueError):
    """A value whose text would change the file it is written into; says which rule."""


# Every line break some reader honours: Python's splitlines(), and U+2028/U+2029 for the
# editors and terminals an operator reads the file in. A value never holds one.
_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def _one_line(text: str) -> str | None:
    if any(c in text for c in _BREAKS):
        return "a line break"
    if _CONTROL.search(text):
        return "a control character"
    return None


def _comment(text: str) -> str | None:
    """Text on a comment line the template wrote (`# {{ header }}`): it must stay on it."""
    return _one_line(text)


# slurm.conf and its includes (slurm.conf(5)): `Key=Value` words split on blanks, `#` starts a
# comment anywhere on a line (`\#` is the only escape), a double-quoted value may hold blanks.
_SLURM_QUOTED = re.compile(r'"[^"#\\]*"')


def _slurm(text: str) -> str | None:
    if (broken := _one_line(text)) is not None:
        return broken
    if "#" in text:
        return "`#`, which starts a comment"
    if "\\" in text:
        return "`\\`"
    if any(c in text for c in ' \t"') and not _SLURM_QUOTED.fullmatch(text):
        return "a blank or quote outside one quoted value, which starts another Key=Value"
    return None


# chrony.conf(5): a directive and its words split on blanks; a line starting with `!`, `;`, `#`
# or `%` is a comment. A value is one word: a second one is an option of the directive
# (`iburst`, `key 5`, `minpoll -6`), a line break another directive (`cmdallow all`).
def _chrony(text: str) -> str | None:
    if (broken := _one_line(text)) is not None:
        return broken
    if not text:
        return "nothing"
    if any(c.isspace() for c in text):
        return "a blank, which starts another word of the directive"
    if text[0] in "!;#%":
        return f"`{text[0]}` first, which starts a comment"
    return None


# nccl.conf: NCCL reads `NAME=VALUE` to the end of the line, no quoting; `#` first is a comment.
_NCCL_LINE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=[^\n]{0,1023}")


def _nccl(text: str) -> str | None:
    if (broken := _one_line(text)) is not None:
        return broken
    if not _NCCL_LINE.fullmatch(text):
        return "not one `NAME=VALUE` line of at most 1023 characters"
    return None


# bash: a value is exactly one word as written, plain or as `shlex.quote` quotes it.
_SH_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def _shell(text: str) -> str | None:
    if (broken := _one_line(text)) is not None:
        return broken
    if _SH_PLAIN.fullmatch(text):
        return None
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return "an unbalanced quote"
    if len(words) != 1 or shlex.quote(words[0]) != text:
        return "more than one shell word, or a word that is not quoted"
    return None


# `#SBATCH --option=value`: sbatch reads one word per option, with no quoting at all.
_SBATCH = re.compile(r"[A-Za-z0-9_.,:/\[\]+@%=-]+")


def _sbatch(text: str) -> str | None:
    if (broken := _one_line(text)) is not None:
        return broken
    if not _SBATCH.fullmatch(text):
        return "not one #SBATCH word (letters, digits and `_ . , : / [ ] + @ % = -`)"
    return None


def _yaml(text: str, value: Any = None) -> str | None:
    """One YAML scalar as written (`{{ x | yaml_scalar }}`): read back where it stands, it is
    exactly `value` (the text itself when none is given): no `#` comment, no `key: value`, no
    document marker, no second line."""
    if (broken := _one_line(text)) is not None:
        return broken
    from cluster_tool.render.engine import load_rendered_yaml  # the reader of rendered YAML

    try:
        read = load_rendered_yaml(f"x: {text}\n")
    except yaml.YAMLError:
        return "text YAML does not read as one value"
    expected = text if value is None else value
    if not isinstance(read, dict) or read.get("x", object()) != expected or len(read) != 1:
        return "text YAML reads as something else (a comment, a mapping, another type)"
    return None


# systemd.syntax(7): `Key=value`, a line starting with `#` or `;` a comment, `[` a section;
# `\` escapes and `"` groups inside values, `%` starts a specifier (`%%` is a percent sign).
def _systemd(text: str) -> str | None:
    if (broken := _one_line(text)) is not None:
        return broken
    if '"' in text or "\\" in text:
        return "a quote or backslash, which ends or escapes the setting's quoting"
    if "%" in text.replace("%%", ""):
        return "a lone `%`, which starts a systemd specifier"
    if text[:1] in ("#", ";", "["):
        return f"`{text[:1]}` first, which starts a comment or section"
    return None


FORMATS: dict[str, Callable[[str], str | None]] = {
    "comment": _comment,
    "slurm": _slurm,
    "chrony": _chrony,
    "nccl": _nccl,
    "shell": _shell,
    "sbatch": _sbatch,
    "yaml": _yaml,
    "systemd": _systemd,
}

_FILE_NAMES = {
    "comment": "a comment line",
    "slurm": "a Slurm config file",
    "chrony": "chrony.conf",
    "nccl": "nccl.conf",
    "shell": "a bash script",
    "sbatch": "an #SBATCH line",
    "yaml": "a YAML file",
    "systemd": "a systemd unit",
}


def check(fmt: str, text: str, what: str | None = None, value: Any = None) -> str:
    """`text` when it can be written as one value of format `fmt`; else UnsafeValue naming the
    value (`what`), the file and the rule. For YAML, `value` is what the text must read back as
    (itself when None)."""
    reason = _yaml(text, value) if fmt == "yaml" else FORMATS[fmt](text)
    if reason is None:
        return text
    shown = text if len(text) <= 80 else text[:77] + "..."
    named = f"{what}: " if what else ""
    raise UnsafeValue(
        f"{named}{shown!r} cannot be written into {_FILE_NAMES[fmt]}: it holds {reason}"
    )


def format_of(template: str) -> str:
    """The format of a template of `templates/render/` by the file it writes."""
    if template.startswith("slurm/"):
        return "slurm"
    if template.endswith(".sbatch.j2"):
        return "shell"
    if template.endswith((".yml.j2", ".yaml.j2")):
        return "yaml"
    if template == "nccl.conf.j2":
        return "nccl"
    raise KeyError(f"no format known for template {template!r}")


# The variables `render` writes into group_vars/all.yml (or a spec's `ansible_vars` sets as a
# literal) that a role writes into a file of another grammar: chrony.conf (roles/common),
# slurm.conf and slurmdbd.conf (roles/slurm), the rdma-ndd unit drop-in (roles/doca_ofed).
ROLE_DESTINATIONS: dict[str, str] = {
    "common_timesync_upstream_servers": "chrony",  # `server X iburst`
    "common_timesync_allow": "chrony",  # `allow NETWORK`
    "cluster_management_network": "chrony",  # `allow` by default
    "slurm_cluster_name": "slurm",  # ClusterName=
    "cluster_name": "slurm",  # ClusterName= by default
    "cluster_slurm_controller": "slurm",  # SlurmctldHost=
    "cluster_slurmdbd_host": "slurm",  # AccountingStorageHost=, DbdHost=
    "slurm_health_check_node_state": "slurm",  # HealthCheckNodeState=
    "slurm_partitions": "slurm",  # PartitionName= ... lines
    "doca_ofed_node_description_format": "systemd",  # Environment="RDMA_NDD_ND_FORMAT=..."
}


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def check_role_variables(variables: dict[str, Any]) -> None:
    """UnsafeValue for the first string, in a variable of ROLE_DESTINATIONS, that the role's
    file could not hold as one value. A value holding an Ansible expression (`{{`) is the
    operator's Ansible and is checked by the role when it runs, not here."""
    for name, fmt in ROLE_DESTINATIONS.items():
        if name not in variables:
            continue
        for text in _strings(variables[name]):
            if "{{" in text or "{%" in text:
                continue
            if fmt == "systemd":
                text = text.replace("%", "%%")  # the role doubles it (rdma-ndd drop-in)
            check(fmt, text, name)
