"""Hostile strings in every string field of the spec: `spec check` refuses the value with a
located error, or every rendered file reads back (each with its own grammar, group_vars as a
play sees it) with the value intact as data and nothing added.

`ansible_vars` values are left out on purpose: they are the one place meant for Ansible
templates and are written as given (docs/security.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from cluster_tool.errors import SpecError
from cluster_tool.render import render_files
from cluster_tool.render.engine import TEMPLATED_VARS, load_rendered_yaml
from cluster_tool.spec import load_spec_text, models
from tests.unit.render.test_text_stays_data import check_rendered

ROOT = Path(__file__).resolve().parents[3]
LAB = load_spec_text((ROOT / "examples" / "lab.yml").read_text(encoding="utf-8"), "lab.yml")

# The whole lab spec with every default written out, plus the optional strings it leaves
# unset, so every string field of the model has a place to take a hostile value.
BASE: dict[str, Any] = LAB.model_dump(mode="json", by_alias=True)
BASE["slurm"]["cluster_name"] = "lab"
BASE["nccl"]["socket_ifname"] = "eth0"
BASE["nccl"]["extra_env"] = {"NCCL_DEBUG": "INFO"}
BASE["nodes"][1]["bmc_address_pattern"] = "10.77.0.1:8{number:03d}"
BASE["slurm"]["partitions"][0]["nodes"] = "gpu[001-004]"
BASE["slurm"]["login_nodes"] = "head"
BASE.pop("ansible_vars")

Path_ = tuple[str | int, ...]


def _string_paths(data: Any, path: Path_ = ()) -> list[Path_]:
    if isinstance(data, dict):
        return [p for key, value in data.items() for p in _string_paths(value, (*path, key))]
    if isinstance(data, list):
        return [p for i, value in enumerate(data) for p in _string_paths(value, (*path, i))]
    return [path] if isinstance(data, str) else []


PATHS = _string_paths(BASE)

FRAGMENTS = [
    "\n", "\r\n", "\x00", "\x1b[2J", "\t", " ", "{{ 7*7 }}", "{% raw %}", "{#", "}}",
    "$(id)", "${HOME}", "`id`", "; id", " && id", " | sh", "../", "/..", "..", "'", '"',
    "\\", "#", "=", ",", ":", "%", "!unsafe ", "*", "?", "[", "]", "@", "&", "<", ">",
    "é", "\u202e", "NodeName=evil01", "\nPartitionName=pwn Nodes=ALL", "\nLD_PRELOAD=/x.so",
]  # fmt: skip


# What the issue names: a line break, a template marker, a command substitution, `../`.
MARKERS = ("\n", "\r", "{{", "{%", "$(", "`", "../")


def _get(data: Any, path: Path_) -> Any:
    for part in path:
        data = data[part]
    return data


def _set(data: Any, path: Path_, value: Any) -> Any:
    copy = json.loads(json.dumps(data))
    target = copy
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return copy


@st.composite
def hostile(draw: st.DrawFn) -> tuple[Path_, str]:
    path = draw(st.sampled_from(PATHS))
    base = str(_get(BASE, path))
    fragment = draw(st.sampled_from(FRAGMENTS))
    at = draw(st.integers(0, len(base)))
    value = draw(
        st.one_of(
            st.just(base[:at] + fragment + base[at:]),
            st.just(fragment),
            st.text(st.sampled_from("".join(FRAGMENTS) + "az09-_./"), max_size=24),
            st.text(max_size=12),
        )
    )
    return path, value


def _as_yaml_reads(text: str, path: Path_) -> Any:
    # The value as the spec file means it: YAML itself folds some characters (U+0085 in a
    # plain scalar reads as a line break), which is the file's meaning, not the renderer's.
    return _get(yaml.safe_load(text), path)


def _dotted(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out


def _ansible_view(text: str, tmp_path: Path) -> dict[str, Any]:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    path = tmp_path / "all.yml"
    path.write_text(text)
    loader = DataLoader()
    data = loader.load_from_file(str(path), trusted_as_template=True)
    templar = Templar(loader=loader, variables={**data, "inventory_dir": "/inv"})
    return {
        key: templar.template(trust_as_template("{{ " + key + " }}"))
        for key in data
        if key not in TEMPLATED_VARS
    }


@settings(max_examples=150)
@given(case=hostile())
@example(case=((("management", "domain"), "{{ lookup('pipe', 'id') }}")))
@example(case=((("slurm", "cluster_name"), "../../etc")))
@example(case=((("nccl", "tests", "min_bytes"), "8; curl x | sh")))
@example(case=((("fabric", "switch_name_pattern"), "(?P<name>\\S+)|{{ 7*7 }}")))
@example(case=((("nodes", 0, "hosts"), "head\nNodeName=evil01")))
def test_a_hostile_string_is_refused_with_its_location_or_stays_data(
    case: tuple[Path_, str], tmp_path_factory: Any
) -> None:
    path, value = case
    data = _set(BASE, path, value)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    try:
        cluster = load_spec_text(text, "c.yml")
    except SpecError as exc:
        problems = [str(p) for p in exc.problems]
        assert problems
        # Every problem is FILE:LINE:COL: path: what, on a line of the file.
        lines = text.count("\n") + 1
        for problem in problems:
            match = re.match(r"^c\.yml:(\d+):\d+: ", problem)
            assert match and 1 <= int(match.group(1)) <= lines, problem
        if any(marker in value for marker in MARKERS):
            # A marker is refused at the field itself (or at the mapping above a bad key),
            # not found by chance through another rule.
            where = _dotted(path)
            paths = [p.split(": ", 2)[1] for p in problems]
            assert any(
                q == where or where.startswith((f"{q}.", f"{q}[")) or q.startswith(where)
                for q in paths
            ), problems
        event("refused")
        return
    # Accepted: the value is data in every rendered file.
    event("accepted")
    files = render_files(cluster)
    spec = json.loads(files["spec.json"])
    assert _get(spec, path) == _as_yaml_reads(text, path)
    check_rendered(cluster, files)
    group_vars = load_rendered_yaml(files["group_vars/all.yml"])
    seen = _ansible_view(files["group_vars/all.yml"], tmp_path_factory.mktemp("gv"))
    assert seen == {k: v for k, v in group_vars.items() if k not in TEMPLATED_VARS}
    hosts = load_rendered_yaml(files["hosts.yml"])["all"]["hosts"]
    for node in cluster.hosts():
        assert hosts[node.name].get("bmc_address") == node.bmc_address


# The fields whose types let through characters some rendered grammar gives a meaning to
# (spaces, `%`, `=`, `^`, `(`, `#`, `&`, `?`, a whole regex, free text): values drawn from
# what each type allows must come out of every file as data.
PROFILE = ("profiles", "lab-h100-8x-hdr")
_REGEX_TAIL = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=30).map(
    re.escape
)
WIDE: dict[Path_, st.SearchStrategy[str]] = {
    (*PROFILE, "description"): st.text(max_size=40),
    (*PROFILE, "gpu_product"): st.from_regex(models._LABEL_RE, fullmatch=True),
    ("fabric", "switch_model"): st.from_regex(models._LABEL_RE, fullmatch=True),
    ("fabric", "switch_name_pattern"): _REGEX_TAIL.map(lambda t: r"^(?P<name>\S+)$|" + t),
    ("fabric", "node_description_format"): st.from_regex(models._NDD_FORMAT_RE, fullmatch=True).map(
        lambda t: "%h " + t
    ),
    ("nccl", "extra_env", "NCCL_DEBUG"): st.from_regex(models._ENV_VALUE_RE, fullmatch=True),
    ("nccl", "tests", "binary_dir"): st.from_regex(models._PATH_RE, fullmatch=True),
    ("slurm", "partitions", 0, "max_time"): st.from_regex(models._DURATION_RE, fullmatch=True),
    ("software", "repositories", "cuda"): st.from_regex(
        r"https://[A-Za-z0-9._~:/?#\[\]@&+,=%-]+", fullmatch=True
    ),
}


@st.composite
def allowed(draw: st.DrawFn) -> tuple[Path_, str]:
    path = draw(st.sampled_from(sorted(WIDE, key=str)))
    return path, draw(WIDE[path])


@settings(max_examples=100)
@given(case=allowed())
def test_values_the_types_allow_stay_data(case: tuple[Path_, str], tmp_path_factory: Any) -> None:
    path, value = case
    text = yaml.safe_dump(_set(BASE, path, value), sort_keys=False, allow_unicode=True)
    try:
        cluster = load_spec_text(text, "c.yml")
    except SpecError as exc:
        # Only a length limit or a cross-field rule may still refuse such a value.
        assert all(re.match(r"^c\.yml:\d+:\d+: ", str(p)) for p in exc.problems)
        event("refused")
        return
    event("accepted")
    files = render_files(cluster)
    assert _get(json.loads(files["spec.json"]), path) == _as_yaml_reads(text, path)
    check_rendered(cluster, files)
    group_vars = load_rendered_yaml(files["group_vars/all.yml"])
    seen = _ansible_view(files["group_vars/all.yml"], tmp_path_factory.mktemp("gv"))
    assert seen == {k: v for k, v in group_vars.items() if k not in TEMPLATED_VARS}
