"""The node's NCCL environment (`/etc/nccl.conf`) against the `nccl.conf` rendered from the spec."""

from __future__ import annotations

from cluster_tool.findings import Finding

__all__ = ["check_nccl_conf", "parse_nccl_conf"]


def parse_nccl_conf(text: str) -> dict[str, str]:
    """`KEY=VALUE` lines (comments and blanks skipped). NCCL reads the first `=` as the
    separator, so `NCCL_IB_HCA==mlx5_0` (exact match) keeps its `=mlx5_0` value."""
    env: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        env[key.strip()] = value.strip()
    return env


def check_nccl_conf(node: str, rendered: str, on_node: str | None) -> list[Finding]:
    """`nccl.env` for every variable missing or different on the node (error) and every
    NCCL variable the render does not set (warning: someone tuned a node by hand)."""
    want = parse_nccl_conf(rendered)
    if on_node is None:
        return [
            Finding(
                check="nccl.env",
                node=node,
                component="/etc/nccl.conf",
                expected="the rendered nccl.conf",
                observed="absent",
                message=f"{node}: /etc/nccl.conf is missing; NCCL will guess HCAs and interfaces",
            )
        ]
    have = parse_nccl_conf(on_node)
    out: list[Finding] = []
    for key, value in want.items():
        if have.get(key) != value:
            seen = "unset" if key not in have else f"{key}={have[key]}"
            out.append(
                Finding(
                    check="nccl.env",
                    node=node,
                    component=key,
                    expected=f"{key}={value}",
                    observed=seen,
                    message=f"{node} /etc/nccl.conf: {seen}; the render says {key}={value}",
                )
            )
    for key in sorted(set(have) - set(want)):
        if key.startswith("NCCL_"):
            out.append(
                Finding(
                    check="nccl.env",
                    severity="warning",
                    node=node,
                    component=key,
                    expected="unset",
                    observed=f"{key}={have[key]}",
                    message=f"{node} /etc/nccl.conf sets {key}={have[key]}, which the render "
                    "does not",
                )
            )
    return out
