"""The lab's UFM stand-in (issue 29) answers the endpoint the opensm and sharp roles ask as UFM
Enterprise's REST API guide documents it ("UFM Version REST API": GET /ufmRest/app/ufm_version,
with `opensm`, `sharp`, `ufm_release_version`), only with its credentials."""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from cluster_lab import ufm


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    state = tmp_path / "state.json"
    ufm.set_sharp(state, True)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), ufm._handler("3.3.23", state, "admin", "s3cret"))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", state
    finally:
        httpd.shutdown()
        httpd.server_close()


def _get(url: str, user: str, password: str) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url)
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_ufm_version_names_its_sm_and_sharp_while_sharp_is_on(server: tuple[str, Path]) -> None:
    base, state = server
    status, body = _get(base + ufm.VERSION_PATH, "admin", "s3cret")
    assert status == 200
    assert body["opensm"] == "3.3.23" and body["sharp"] == "3.9.0"
    assert body["ufm_release_version"] == ufm.UFM_RELEASE
    ufm.set_sharp(state, False)
    status, body = _get(base + ufm.VERSION_PATH, "admin", "s3cret")
    assert status == 200 and "sharp" not in body


def test_wrong_credentials_and_other_paths_are_refused(server: tuple[str, Path]) -> None:
    base, _ = server
    assert _get(base + ufm.VERSION_PATH, "admin", "wrong")[0] == 401
    assert _get(base + "/ufmRest/resources/systems", "admin", "s3cret")[0] == 404
