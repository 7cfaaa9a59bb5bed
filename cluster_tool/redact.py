"""Secrets: one rule for what counts as a secret (`is_secret_name`) and one registry of the
secret values a run knows (`Secrets`), replaced in the values themselves before anything is
encoded, so a secret is caught whatever its characters and whatever its length."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REDACTED = "[redacted]"

# A name whose words include one of these holds a secret (`slurm_dbd_storage_pass`,
# `slurm_munge_key`, `CLUSTER_TOOL_BMC_PASSWORD`, `GITHUB_TOKEN`)...
_SECRET_WORDS = frozenset(
    {"password", "passwd", "pass", "passphrase", "secret", "token", "key", "credential",
     "credentials", "cred", "creds", "apikey"}
)  # fmt: skip
# ... unless its last word says it only points at one (`slurm_munge_key_file`,
# `nccl_repo_key_url`, `bmc_password_env`).
_REFERENCE_WORDS = frozenset({"file", "path", "dir", "url", "uri", "env", "ref"})
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")
# Values an environment variable takes as a switch, not as a secret.
_FLAG = re.compile(r"\d{0,2}|true|false|yes|no|on|off|none|null", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Whether a variable (environment or Ansible) of this name holds a secret itself: the one
    rule the spec check, the Ansible runner and the run record all use."""
    words = [w for w in _WORD_SPLIT.split(str(name).lower()) if w]
    if not words or words[-1] in _REFERENCE_WORDS:
        return False
    return any(w in _SECRET_WORDS for w in words)


@dataclass
class Secrets:
    """Values that must never be written: added as they are learnt, never stored themselves."""

    values: set[str] = field(default_factory=set)

    def add(self, value: object) -> None:
        """Register a secret, whatever its characters or length (an empty value hides nothing)."""
        if value is None or isinstance(value, bool):
            return
        text = str(value)
        for form in (text, text.strip()):
            if form:
                self.values.add(form)

    def add_named(self, values: Mapping[str, Any]) -> None:
        """Register every value (nested too) held under a secret name in `values`."""
        for name, value in values.items():
            if isinstance(value, Mapping):
                self.add_named(value)
            elif is_secret_name(str(name)) and isinstance(value, str | int | float):
                self.add(value)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Secrets:
        """Every value in `environ` under a secret name (`is_secret_name`), whatever its length;
        but a switch (`USE_KEY=1`, `SKIP_TOKEN=false`) hides nothing, and replacing every "1"
        would wreck what is written instead."""
        found = cls()
        for name, value in environ.items():
            if is_secret_name(name) and not _FLAG.fullmatch(value.strip()):
                found.add(value)
        return found

    def update(self, other: Secrets) -> None:
        self.values |= other.values

    def _longest_first(self) -> list[str]:
        # A secret that contains another is replaced whole.
        return sorted(self.values, key=len, reverse=True)

    def redact(self, text: str) -> str:
        """`text` with every secret replaced; for text not yet encoded."""
        for value in self._longest_first():
            if value in text:
                text = text.replace(value, REDACTED)
        return text

    def redact_value(self, data: Any) -> Any:
        """A copy of JSON-like data (dicts, lists, strings) with the secrets replaced in every
        string value before it is encoded as JSON, HTML or XML. Keys are the record's schema
        (`label`, `nodes`), never data from outside, and stay as they are."""
        if not self.values:
            return data
        if isinstance(data, str):
            return self.redact(data)
        if isinstance(data, Mapping):
            return {k: self.redact_value(v) for k, v in data.items()}
        if isinstance(data, list | tuple):
            return [self.redact_value(v) for v in data]
        return data

    def encoded_forms(self) -> list[bytes]:
        """Every way a secret can appear in a file written by someone else (ansible-runner's
        artifacts, a tool's raw output): raw, JSON-escaped, HTML/XML-escaped; longest first."""
        forms: set[bytes] = set()
        for value in self.values:
            for text in (
                value,
                json.dumps(value)[1:-1],
                json.dumps(value, ensure_ascii=False)[1:-1],
                html.escape(value),
                html.escape(value, quote=False),
                html.escape(value).replace("&#x27;", "&apos;"),
            ):
                if text:
                    forms.add(text.encode("utf-8"))
        return sorted(forms, key=len, reverse=True)

    def redact_bytes(self, data: bytes) -> bytes:
        for form in self.encoded_forms():
            if form in data:
                data = data.replace(form, REDACTED.encode())
        return data

    def redact_file_content(self, path: Path, data: bytes) -> bytes:
        """The content of a file with its secrets replaced: a JSON file on its values (so the
        file stays JSON whatever the secret holds), anything else in every encoded form."""
        if path.suffix == ".json":
            try:
                parsed = json.loads(data)
            except ValueError:
                pass
            else:
                clean = self.redact_value(parsed)
                if clean == parsed:
                    return data
                return (json.dumps(clean, indent=2, sort_keys=True) + "\n").encode()
        return self.redact_bytes(data)
