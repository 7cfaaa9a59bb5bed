"""Build the artifact the cluster_tool_node role installs on nodes, on the Ansible controller.

A tar of wheels: cluster-tool's own, built from the checkout, and those of its runtime
dependencies and of pip, downloaded from the index this Python's pip is configured with (an
air-gapped site's mirror), binary wheels only, for this Python. Its name carries a key made of
the project version, the wheel's digest (hatchling builds reproducible wheels) and the Python
major.minor, so a second converge finds it and the node copy changes only with the code. A tree
built before is found without starting pip: a note in BUILD_DIR named by the digest of its
sources (the package and the project metadata, byte for byte) names its artifact.

Usage: build_artifact.py SOURCE_DIR BUILD_DIR; prints one JSON object: artifact, key, python,
changed (a new artifact was built).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path


def _pip(*args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def _reset(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    return info


# What the wheel is built from: the package (hatch's wheel target) and the project metadata.
# Hashed whole, byte for byte, before any build: a superset of the wheel's inputs, so a change
# to any of them builds again, and an unchanged tree finds its artifact without starting pip.
_SOURCES = ("pyproject.toml", "README.md")
_PACKAGE = "cluster_tool"


def source_digest(source: Path) -> str:
    digest = hashlib.sha256()
    files = [source / name for name in _SOURCES]
    files += sorted(
        p
        for p in (source / _PACKAGE).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )
    for path in files:
        digest.update(str(path.relative_to(source)).encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"(none)")
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def build(source: Path, build_dir: Path) -> dict[str, object]:
    build_dir.mkdir(parents=True, exist_ok=True)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    seen = build_dir / f"source-{source_digest(source)}-py{python}.json"
    try:
        known = json.loads(seen.read_text())
        if Path(known["artifact"]).is_file():
            return {**known, "changed": False}
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not built from this tree yet (or the note is unreadable): build
    result = _build(source, build_dir, python)
    note = build_dir / f".{seen.name}.tmp"
    note.write_text(json.dumps({k: v for k, v in result.items() if k != "changed"}))
    note.replace(seen)
    return result


def _build(source: Path, build_dir: Path, python: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory(dir=build_dir) as tmp:
        wheels = Path(tmp) / "wheels"
        _pip("wheel", "--no-deps", "--wheel-dir", str(wheels), str(source))
        (wheel,) = wheels.glob("cluster_tool-*.whl")
        version = wheel.name.split("-")[1]
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()[:12]
        key = f"{version}-{digest}-py{python}"
        artifact = build_dir / f"cluster-tool-{key}.tar"
        if artifact.exists():
            return {"artifact": str(artifact), "key": key, "python": python, "changed": False}
        _pip("download", "--only-binary=:all:", "--dest", str(wheels), str(wheel), "pip")
        partial = Path(tmp) / artifact.name
        with tarfile.open(partial, "w") as tar:
            for path in sorted(wheels.iterdir()):
                tar.add(path, arcname=f"wheels/{path.name}", filter=_reset)
        os.chmod(partial, 0o644)
        shutil.move(partial, artifact)
    return {"artifact": str(artifact), "key": key, "python": python, "changed": True}


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: build_artifact.py SOURCE_DIR BUILD_DIR", file=sys.stderr)
        return 2
    try:
        result = build(Path(argv[1]).resolve(), Path(argv[2]))
    except (subprocess.CalledProcessError, ValueError, OSError) as exc:
        print(f"build_artifact: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
