"""Air-gapped sites (issue 18, finding 11): the spec's repositories.nccl_tests, .pyxis and .enroot
are rendered into the inventory, and the roles now download from them instead of GitHub."""

from __future__ import annotations

from pathlib import Path

from cluster_tool.ansible import run_playbook
from tests.unit.ansible.test_preflight import _inventory
from tests.unit.ansible.test_preflight_nodes import HOSTS

RESOLVE = Path(__file__).parent / "playbooks" / "download_urls.yml"


def _resolve(tmp_path: Path, expect: dict[str, object], **changes: object) -> list[str]:
    inventory = _inventory(tmp_path, **changes)
    (inventory / "hosts.yml").write_text(HOSTS)
    result = run_playbook(
        RESOLVE,
        inventory,
        extravars={"expect": expect},
        private_data_dir=tmp_path / "pdd",
        fact_cache=tmp_path / "facts",
    )
    return [e.message or "" for e in result.events if e.failed] + ([] if result.rc == 0 else ["rc"])


def test_the_default_spec_still_downloads_the_pinned_releases_from_github(tmp_path: Path) -> None:
    gh = "https://github.com/NVIDIA"
    expect = {
        "nccl_tests": f"{gh}/nccl-tests/archive/refs/tags/v2.13.11.tar.gz",
        "pyxis": f"{gh}/pyxis/archive/refs/tags/v0.20.0.tar.gz",
        "enroot": [
            f"{gh}/enroot/releases/download/v3.5.0/enroot_3.5.0-1_amd64.deb",
            f"{gh}/enroot/releases/download/v3.5.0/enroot+caps_3.5.0-1_amd64.deb",
        ],
    }
    assert _resolve(tmp_path, expect) == []


def test_a_mirror_in_the_spec_is_where_the_roles_download(tmp_path: Path) -> None:
    mirror = "https://git.example.net/mirror"
    expect = {
        "nccl_tests": f"{mirror}/nccl-tests/archive/refs/tags/v2.13.11.tar.gz",
        "pyxis": f"{mirror}/pyxis/archive/refs/tags/v0.20.0.tar.gz",
        "enroot": [
            f"{mirror}/enroot/v3.5.0/enroot_3.5.0-1_amd64.deb",
            f"{mirror}/enroot/v3.5.0/enroot+caps_3.5.0-1_amd64.deb",
        ],
    }
    problems = _resolve(
        tmp_path,
        expect,
        nccl_tests_repo_url=f"{mirror}/nccl-tests.git",
        pyxis_repo_url=f"{mirror}/pyxis.git",
        enroot_download_url=f"{mirror}/enroot/",
    )
    assert problems == []
