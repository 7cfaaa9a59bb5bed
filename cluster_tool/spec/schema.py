"""The spec's JSON schema, for editors (yaml-language-server) and CI linters."""

from __future__ import annotations

from typing import Any

from cluster_tool.spec.models import API_VERSION, Cluster


def spec_schema() -> dict[str, Any]:
    """JSON schema (draft 2020-12) of `kind: Cluster` documents, with every default."""
    schema = Cluster.model_json_schema(by_alias=True, mode="validation")
    # A profile that `extends` another inherits its required keys, so they are required
    # only when `extends` is absent (the loader merges the base before validating).
    profile = schema["$defs"]["NodeProfile"]
    required = profile.pop("required", [])
    if required:
        profile["if"] = {"not": {"required": ["extends"]}}
        profile["then"] = {"required": required}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://cluster-tool.invalid/schema/{API_VERSION}/cluster.json",
        **schema,
    }
