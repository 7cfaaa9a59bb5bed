"""Build the artifact the cluster_tool_node role installs on nodes, on the Ansible controller.

A tar of wheels: cluster-tool's own, built from the checkout, and those of its runtime
dependencies and of pip, downloaded from the index this Python's pip is configured with (an
air-gapped site's mirror), binary wheels only, for this Python. Its name carries a key made of
the project version, the wheel's digest (hatchling builds reproducible wheels) and the Python
major.minor, so a second converge finds it and the node copy changes only with the code.

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


def build(source: Path, build_dir: Path) -> dict[str, object]:
    build_dir.mkdir(parents=True, exist_ok=True)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
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
