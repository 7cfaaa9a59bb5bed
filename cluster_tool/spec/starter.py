"""The commented starter spec `cluster-tool init` writes for a profile and a hostlist."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import jinja2

from cluster_tool.bounds import expand_hostlist
from cluster_tool.errors import UsageError
from cluster_tool.spec.loader import load_spec_text
from cluster_tool.spec.models import SUPERPOD_SPINES, builtin_profile
from cluster_tool.spec.profiles import BUILTIN_PROFILES

TEMPLATE = Path(__file__).resolve().parents[2] / "templates" / "init" / "cluster.yml.j2"


def starter_spec(*, name: str, profile: str, hosts: str, network: str) -> str:
    """Spec text for `hosts` of `profile`; validated before it is returned (SpecError if not)."""
    if profile not in BUILTIN_PROFILES:
        raise UsageError(f"unknown profile {profile!r}; built-in: {', '.join(BUILTIN_PROFILES)}")
    count = len(expand_hostlist(hosts, "--hosts"))
    try:
        net = ipaddress.IPv4Network(network)
    except ValueError as exc:
        raise UsageError(f"--network: {exc}") from exc
    # Service hosts at .10 of the first block, GPU nodes from the next /24 when there is room.
    head = net.network_address + 10
    first_gpu = net.network_address + (257 if net.prefixlen <= 22 else 11)
    su_count = -(-count // 32)
    rails = len(builtin_profile(profile).hcas)
    # Beyond the SuperPOD table: one link from every leaf to each of 32 spines, which
    # 64-port spines carry up to 8 SUs; larger clusters need a three-tier design.
    spines = None if su_count in SUPERPOD_SPINES else 32
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    text = env.from_string(TEMPLATE.read_text(encoding="utf-8")).render(
        name=name,
        profile=profile,
        builtin=sorted(BUILTIN_PROFILES),
        hosts=hosts,
        gpu_count=count,
        network=str(net),
        head_address=str(head),
        gpu_address=str(first_gpu),
        rails=rails,
        spines=spines,
    )
    load_spec_text(text, "<init>")
    return text
