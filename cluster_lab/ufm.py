"""The lab's UFM stand-in: the REST endpoint the opensm and sharp roles ask when the spec's
`fabric.subnet_manager_mode` is `ufm`, served on the lab bridge (the host side).

What it is: `GET /ufmRest/app/ufm_version` with basic authentication, answering as UFM Enterprise
does (UFM Enterprise REST API Guide, "UFM Version REST API": `ufm_release_version`, the `opensm`
it runs and, with SHARP enabled in UFM, the `sharp` aggregation manager's release). Its subnet
manager is the lab's own: the Debian OpenSM that `lab up` starts on the spec's subnet-manager host
against ibsim, which the roles in mode `ufm` leave alone, as they leave UFM's. Its credentials are
lab-only secrets in the lab's context (CLUSTER_TOOL_UFM_USERNAME, CLUSTER_TOOL_UFM_PASSWORD); they
reach this process through its environment, never its arguments.

What only a real UFM proves: its own SM and SHARP AM (their configuration, HA, reservations), TLS,
and every other endpoint of its API.

Whether UFM runs SHARP is its state file's (`<labdir>/ufm/state.json`, `{"sharp": true}`), read at
every request, so a test can turn it off and on as an operator would in UFM's gv.cfg; `lab up`
writes it from the spec's `fabric.sharp`.

Run as `python -m cluster_lab.ufm --bind ADDR --port PORT --opensm VERSION --state FILE`.
"""

from __future__ import annotations

import argparse
import base64
import hmac
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cluster_lab.config import LabConfig
    from cluster_lab.host import ProcRef

VERSION_PATH = "/ufmRest/app/ufm_version"
# The UFM Enterprise release the stand-in says it is (2024 LTS U3, docs.nvidia.com's
# ufmenterpriseumv6194), and the SHARP AM UFM ships with it when SHARP is on.
UFM_RELEASE = "6.19.4-2"
SHARP_RELEASE = "3.9.0"
USER_ENV, PASSWORD_ENV = "CLUSTER_TOOL_UFM_USERNAME", "CLUSTER_TOOL_UFM_PASSWORD"


def version_document(opensm: str, sharp: str | None) -> dict[str, object]:
    """What GET /ufmRest/app/ufm_version answers."""
    document: dict[str, object] = {"ufm_release_version": UFM_RELEASE, "opensm": opensm}
    if sharp:
        document["sharp"] = sharp
    document["plugins"] = {}
    return document


def sharp_on(state: Path) -> bool:
    """Whether the stand-in's UFM runs SHARP (its state file; off when unreadable)."""
    try:
        return bool(json.loads(state.read_text()).get("sharp"))
    except (OSError, ValueError, AttributeError):
        return False


def set_sharp(state: Path, on: bool) -> None:
    """Turn SHARP on or off in the stand-in's UFM (as gv.cfg's [Sharp] sharp_enabled)."""
    state.parent.mkdir(parents=True, exist_ok=True)
    tmp = state.with_name(f".{state.name}.tmp")
    tmp.write_text(json.dumps({"sharp": on}) + "\n")
    tmp.replace(state)


def _handler(opensm: str, state: Path, user: str, password: str) -> type[BaseHTTPRequestHandler]:
    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "UFM-lab"

        def log_message(self, format: str, *args: object) -> None:  # the base's name
            sys.stderr.write("ufm-lab: " + (format % args) + "\n")

        def do_GET(self) -> None:  # http.server's method name
            given = self.headers.get("Authorization", "")
            if not user or not hmac.compare_digest(given.encode(), expected.encode()):
                self._answer(
                    401, {"error": "Unauthorized"}, {"WWW-Authenticate": 'Basic realm="UFM"'}
                )
            elif self.path.rstrip("/") == VERSION_PATH:
                self._answer(
                    200, version_document(opensm, SHARP_RELEASE if sharp_on(state) else None)
                )
            else:
                self._answer(404, {"error": "Not Found"})

        def _answer(
            self, status: int, body: dict[str, object], headers: dict[str, str] | None = None
        ) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cluster_lab.ufm", description=__doc__)
    parser.add_argument("--bind", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--opensm", required=True)
    parser.add_argument("--state", type=Path, required=True)
    args = parser.parse_args(argv)
    handler = _handler(
        args.opensm, args.state, os.environ.get(USER_ENV, ""), os.environ.get(PASSWORD_ENV, "")
    )
    server = ThreadingHTTPServer((args.bind, args.port), handler)
    server.serve_forever()
    return 0


def opensm_version(cache_debs: Path) -> str:
    """The lab's OpenSM release (Debian's package in the cache: `3.3.23-2+b1` -> `3.3.23`)."""
    found = sorted(cache_debs.glob("opensm_*_amd64.deb"))
    return found[-1].name.split("_")[1].split("-")[0] if found else "unknown"


def state_file(config: LabConfig) -> Path:
    return config.lab_dir / "ufm" / "state.json"


def start(config: LabConfig, credentials: dict[str, str], sharp: bool) -> ProcRef:
    """The stand-in on the bridge's host address, with the lab's UFM credentials; SHARP on in
    it as the spec says."""
    from cluster_lab.host import spawn

    set_sharp(state_file(config), sharp)
    argv = [
        sys.executable, "-m", "cluster_lab.ufm",
        "--bind", config.host_address, "--port", str(config.ufm_port),
        "--opensm", opensm_version(config.cache_repo_dir / "debian"),
        "--state", str(state_file(config)),
    ]  # fmt: skip
    env = {
        **os.environ,
        **{k: credentials[k] for k in (USER_ENV, PASSWORD_ENV) if k in credentials},
    }
    return spawn(argv, log=config.log_dir / "ufm.log", env=env)


if __name__ == "__main__":
    sys.exit(main())
