"""/etc/os-release as real hosts have it (tests/fixtures/os-release, each file's source on its
first line); the figures below are read by hand from those files."""

from __future__ import annotations

import pytest

from cluster_tool.errors import ParseError
from cluster_tool.parsers.os_release import parse_os_release
from tests.conftest import FIXTURES


def _real(name: str) -> str:
    return (FIXTURES / "os-release" / name).read_text().split("\n", 1)[1]


@pytest.mark.parametrize(
    ("name", "os_id", "version", "pretty", "spec"),
    [
        ("ubuntu-22.04.2.txt", "ubuntu", "22.04", "Ubuntu 22.04.2 LTS", "ubuntu2204"),
        ("debian-12.txt", "debian", "12", "Debian GNU/Linux 12 (bookworm)", "debian12"),
        ("ubuntu-20.04.6.txt", "ubuntu", "20.04", "Ubuntu 20.04.6 LTS", None),
    ],
)
def test_real_os_release_files(
    name: str, os_id: str, version: str, pretty: str, spec: str | None
) -> None:
    release = parse_os_release(_real(name))
    assert (release.id, release.version_id, release.pretty_name) == (os_id, version, pretty)
    assert release.spec_name == spec


def test_a_line_that_is_not_key_value_is_named() -> None:
    text = _real("debian-12.txt").replace("VERSION_ID=", "VERSION ID=", 1)
    with pytest.raises(ParseError) as caught:
        parse_os_release(text)
    assert caught.value.line_no == 3 and "expected KEY=value" in str(caught.value)


def test_text_without_an_id_is_not_an_os_release() -> None:
    with pytest.raises(ParseError, match="no ID= line"):
        parse_os_release("# a comment\nNAME=Something\n")
    with pytest.raises(ParseError, match="expected KEY=value"):
        parse_os_release("cat: /etc/os-release: No such file or directory\n")
