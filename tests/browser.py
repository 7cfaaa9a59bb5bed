"""Open a report in headless Chromium (Debian package `chromium`, installed by
scripts/bootstrap): a screenshot, the console's errors and the DOM after its scripts ran."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Opened:
    screenshot: Path
    console_errors: list[str]
    dom: str


def chromium() -> str:
    """The browser's path; a failure on CI, a skip elsewhere, when it is not installed."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed; scripts/bootstrap must apt-get install chromium")
    pytest.skip("chromium is not installed (Debian package `chromium`)")


def open_in_chromium(page: Path, workdir: Path) -> Opened:
    browser = chromium()
    shot = workdir / f"{page.stem}.png"
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={workdir / 'chromium-profile'}",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1280,1600",
    ]
    proc = subprocess.run(
        [browser, *flags, f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln and "ERROR" in ln.upper()]
    dom = subprocess.run(
        [browser, *flags, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout
    return Opened(shot, errors, dom)
