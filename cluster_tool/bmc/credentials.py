"""BMC credentials, resolved from the references the spec names (environment or Ansible vault);
the values live only in memory, never in a repr, a log or a run record."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster_tool.errors import UsageError
from cluster_tool.spec.models import BmcCredentials, SecretRef


@dataclass(frozen=True)
class Credentials:
    """A user name and password; `repr` and `str` never show the password."""

    username: str
    password: str = field(repr=False)

    def __str__(self) -> str:
        return f"{self.username}:***"


def load_vault(vault_file: Path, password_file: Path) -> dict[str, Any]:
    """Variables of an Ansible vault file (a YAML mapping), decrypted with the vault password."""
    from ansible.parsing.dataloader import DataLoader  # type: ignore[import-untyped]
    from ansible.parsing.vault import VaultSecret  # type: ignore[import-untyped]

    try:
        secret = password_file.read_bytes().strip()
    except OSError as exc:
        raise UsageError(f"--vault-password-file {password_file}: {exc.strerror}") from None
    loader = DataLoader()
    loader.set_vault_secrets([("default", VaultSecret(secret))])
    try:
        data = loader.load_from_file(str(vault_file))
    except Exception as exc:  # ansible raises its own error types; say which file, not why in full
        raise UsageError(f"{vault_file}: cannot read the vault: {type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{vault_file}: the vault does not hold a mapping of variables")
    return data


def resolve(
    ref: SecretRef,
    environ: Mapping[str, str] | None = None,
    vault: Mapping[str, Any] | None = None,
) -> str:
    """The value a reference points to (UsageError naming the reference, never the value)."""
    env = os.environ if environ is None else environ
    if ref.env is not None:
        value = env.get(ref.env)
        if not value:
            raise UsageError(f"BMC credentials: environment variable {ref.env} is not set")
        return value
    assert ref.vault is not None
    if vault is None:
        raise UsageError(
            f"BMC credentials come from vault variable {ref.vault}: give --vault-file and "
            "--vault-password-file"
        )
    value = vault.get(ref.vault)
    if value is None or str(value) == "":
        raise UsageError(f"BMC credentials: the vault has no variable {ref.vault}")
    return str(value)


def bmc_credentials(
    refs: BmcCredentials,
    environ: Mapping[str, str] | None = None,
    vault: Mapping[str, Any] | None = None,
) -> Credentials:
    """Resolve the spec's BMC login."""
    return Credentials(
        resolve(refs.username, environ, vault), resolve(refs.password, environ, vault)
    )
