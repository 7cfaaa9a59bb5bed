"""Where the NVIDIA parser tests find their fixtures: the real captures and our own variants."""

from __future__ import annotations

from tests.conftest import FIXTURES, read_real_output

NVIDIA_FIXTURES = FIXTURES / "parsers" / "nvidia"


def fixture(name: str) -> str:
    """One of our fixtures, without its first line (which says where the format comes from)."""
    path = NVIDIA_FIXTURES / name
    if not path.is_file():
        raise FileNotFoundError(f"fixture {path} is missing")
    text = path.read_text(encoding="utf-8")
    first, _, rest = text.partition("\n")
    assert first.startswith("# source: "), f"{name} must start with '# source: ...'"
    return rest


def real(name: str) -> str:
    return read_real_output(name)
