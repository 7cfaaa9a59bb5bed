"""Secrets are redacted on the values, before any encoding: whatever characters a secret holds
and however short it is, no artefact of a run holds it raw, JSON-escaped or HTML-escaped, and
every file of a run is readable by its owner only."""

from __future__ import annotations

import html
import json
import stat
from pathlib import Path
from xml.sax.saxutils import quoteattr

import pytest

from cluster_tool.errors import SpecError
from cluster_tool.findings import Finding
from cluster_tool.spec import load_spec_text
from cluster_tool.workflows.runs import RunRecord, known_secrets
from tests.conftest import REPO

# A quote, a backslash and non-ASCII letters; HTML's specials; and a 3-character munge key.
DBD_PASSWORD = 'd"b\\Übërß'
BMC_PASSWORD = "b<&'\"x"
MUNGE_KEY = "k\\é"


def _encodings(secret: str) -> set[str]:
    """Every form the artefacts could hold a secret in, written out by hand."""
    quoted = quoteattr(secret)[1:-1]
    return {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        html.escape(secret),
        html.escape(secret, quote=False),
        quoted,
    }


def test_secrets_with_quotes_backslashes_non_ascii_and_three_characters_never_land(
    tmp_path: Path,
) -> None:
    munge = tmp_path / "munge.key"
    munge.write_text(MUNGE_KEY + "\n", encoding="utf-8")
    env = {"CLUSTER_TOOL_SLURMDBD_PASSWORD": DBD_PASSWORD, "LAB_BMC_PASSWORD": BMC_PASSWORD}
    record = RunRecord.create(
        tmp_path / "runs", "bringup", {"spec": "lab.yml"}, known_secrets(env, munge)
    )
    # Every way a secret could get in: a raw capture, ansible-runner artefacts written behind
    # the record's back (JSON events escape non-ASCII as \\u00fc, stdout keeps it raw), a
    # journal line, findings (to JSON, HTML and JUnit) and the summary.
    record.write_text("raw/validate/gpu001/dmesg.out", f"munge: key {MUNGE_KEY}\n")
    artifacts = record.path / "ansible" / "artifacts" / "x"
    (artifacts / "job_events").mkdir(parents=True)
    (artifacts / "job_events" / "1-abc.json").write_text(
        json.dumps({"stdout": f"dbd {DBD_PASSWORD} key {MUNGE_KEY}", "pw": BMC_PASSWORD})
    )
    (artifacts / "stdout").write_text(f"ok: dbd={DBD_PASSWORD} bmc={BMC_PASSWORD}\n")
    record.log("power-on", "failed", node="gpu001", detail=f"401 for admin:{BMC_PASSWORD}")
    findings = [
        Finding(
            check="os.env",
            severity="error",
            node="gpu001",
            observed=DBD_PASSWORD,
            message=f"env shows {BMC_PASSWORD} and {MUNGE_KEY}",
        )
    ]
    summary = {
        "command": "bringup",
        "nodes": {"gpu001": {"verdict": "fail", "reason": f"munge {MUNGE_KEY}"}},
    }
    record.finish(summary, findings)

    written = {p.name for p in record.path.rglob("*") if p.is_file()}
    assert {"findings.json", "summary.json", "report.html", "junit.xml", "journal.jsonl"} <= written
    for path in record.path.rglob("*"):
        if path.is_file():
            text = path.read_bytes().decode("utf-8")
            for secret in (DBD_PASSWORD, BMC_PASSWORD, MUNGE_KEY):
                for form in _encodings(secret):
                    assert form not in text, f"{form!r} found in {path.relative_to(record.path)}"
    # The JSON artefacts are still JSON, with the secret replaced where it stood.
    data = json.loads((record.path / "findings.json").read_text(encoding="utf-8"))
    assert data["findings"][0]["observed"] == "[redacted]"
    event = json.loads((artifacts / "job_events" / "1-abc.json").read_text(encoding="utf-8"))
    assert event["pw"] == "[redacted]"


def test_every_file_of_a_run_is_private_to_its_owner(tmp_path: Path) -> None:
    record = RunRecord.create(tmp_path / "runs", "bringup", {"spec": "lab.yml"})
    record.write_text("raw/validate/gpu001/nvidia-smi.out", "GPU 0\n")
    record.log("converge", "done")
    record.finish({"command": "bringup"}, [])
    for path in [record.path, *record.path.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path}: {oct(mode)}"


def test_the_munge_key_is_found_where_the_role_writes_it_under_slurm_cluster_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cluster_tool.workflows.runs import run_secrets

    text = (REPO / "examples" / "lab.yml").read_text(encoding="utf-8")
    cluster = load_spec_text(text, "lab.yml")
    # roles/slurm/defaults/main.yml: ~/.cluster-tool/secrets/{{ slurm_cluster_name }}/munge.key
    renamed = cluster.model_copy(
        update={"slurm": cluster.slurm.model_copy(update={"cluster_name": "slurm-other"})}
    )
    assert renamed.slurm_cluster_name != renamed.name
    key = tmp_path / ".cluster-tool" / "secrets" / "slurm-other" / "munge.key"
    key.parent.mkdir(parents=True)
    key.write_text("Mk1\n", encoding="utf-8")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert "Mk1" in run_secrets(renamed).values


def test_a_literal_munge_key_in_ansible_vars_is_refused_as_a_secret() -> None:
    text = (REPO / "examples" / "lab.yml").read_text(encoding="utf-8")
    text += "\nansible_vars:\n  slurm_munge_key: NotAVaultReference0123456789abcdef\n"
    assert "ansible_vars:" not in (REPO / "examples" / "lab.yml").read_text(encoding="utf-8")
    with pytest.raises(SpecError, match=r"ansible_vars\.slurm_munge_key: a literal secret"):
        load_spec_text(text, "lab.yml")


def test_a_secret_named_in_ansible_vars_is_registered_from_the_environment_it_looks_up() -> None:
    from cluster_tool.workflows.runs import cluster_secrets

    text = (REPO / "examples" / "lab.yml").read_text(encoding="utf-8")
    text += "\nansible_vars:\n  slurm_dbd_storage_pass: \"{{ lookup('env', 'SITE_DBD') }}\"\n"
    cluster = load_spec_text(text, "lab.yml")
    found = cluster_secrets(cluster, environ={"SITE_DBD": "s3"}, secret_dirs=[])
    assert "s3" in found.values


def test_a_short_user_name_and_a_switch_do_not_wreck_the_record(tmp_path: Path) -> None:
    """The BMC user name is not a secret (it was: every `lab` in a record, keys included, became
    `[redacted]`: `"[redacted]el"` for `label`), nor is a switch under a secret-looking name;
    the password still is, at 3 characters."""
    from cluster_tool.spec import load_spec
    from cluster_tool.workflows.runs import cluster_secrets
    from tests.conftest import REPO

    env = {"LAB_BMC_USERNAME": "lab", "LAB_BMC_PASSWORD": "pw3", "USE_KEY": "1"}
    secrets = cluster_secrets(load_spec(REPO / "examples" / "lab.yml"), env, secret_dirs=[])
    record = RunRecord.create(tmp_path / "runs", "bringup", {"spec": "lab.yml"}, secrets)
    job = {"label": "gpu001+gpu002 all_reduce", "nodes": ["gpu001", "gpu002"], "pw": "pw3"}
    record.finish({"command": "bringup", "busbw": [job]}, [])
    summary = json.loads((record.path / "summary.json").read_text(encoding="utf-8"))
    assert summary["busbw"][0] == {**job, "pw": "[redacted]"}
