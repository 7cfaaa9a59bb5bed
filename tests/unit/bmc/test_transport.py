"""BMC transport: the password goes out over https unless the operator says --insecure-bmc,
whatever scheme the spec's address pattern carries, and the run record says what was used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cluster_tool.bmc import Credentials, SushyBmc, TlsPolicy
from cluster_tool.cli import main
from cluster_tool.errors import UsageError
from tests.conftest import REPO

CREDS = Credentials("admin", "bmc-password-1")


class Recorder:
    """Stands in for sushy's connector: records what it would have been sent."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, url: str, **kwargs: Any) -> Any:
        self.calls.append((url, kwargs))
        raise ConnectionError("not a real BMC")


def test_an_http_address_never_gets_the_password_without_insecure_bmc() -> None:
    connect = Recorder()
    bmc = SushyBmc({"gpu001": "http://10.77.0.1:8001"}, CREDS, TlsPolicy(), connect=connect)
    with pytest.raises(UsageError, match="--insecure-bmc"):
        bmc.power_state("gpu001")
    assert connect.calls == [], "the password went out over plain http"


def test_insecure_bmc_lets_http_through_and_says_so() -> None:
    connect = Recorder()
    tls = TlsPolicy(insecure=True)
    bmc = SushyBmc({"gpu001": "http://10.77.0.1:8001"}, CREDS, tls, connect=connect)
    with pytest.raises(Exception, match="not a real BMC"):
        bmc.power_state("gpu001")
    assert [url for url, _ in connect.calls] == ["http://10.77.0.1:8001"]
    assert tls.transport(["http://10.77.0.1:8001", "10.77.0.2"]) == "http"


@pytest.mark.parametrize("address", ["ftp://10.0.0.1", "file:///etc/passwd", "gopher://x"])
def test_no_other_scheme_even_when_insecure(address: str) -> None:
    for tls in (TlsPolicy(), TlsPolicy(insecure=True)):
        with pytest.raises(UsageError, match="not https"):
            tls.url(address)


@pytest.mark.parametrize(
    ("tls", "addresses", "said"),
    [
        (TlsPolicy(), ["10.0.0.1", "https://10.0.0.2"], "verified"),
        (TlsPolicy(ca_bundle="/etc/ssl/bmc.pem"), ["10.0.0.1"], "ca-bundle"),
        (TlsPolicy(insecure=True), ["10.0.0.1", "HTTPS://10.0.0.2"], "insecure"),
        (TlsPolicy(insecure=True, scheme="http"), ["10.0.0.1"], "http"),
        (TlsPolicy(insecure=True), ["https://10.0.0.1", "http://10.0.0.2"], "http"),
    ],
)
def test_the_transport_recorded_is_the_one_used(
    tls: TlsPolicy, addresses: list[str], said: str
) -> None:
    assert tls.transport(addresses) == said


def test_reimage_refuses_an_http_address_pattern_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAB_BMC_USERNAME", "admin")
    monkeypatch.setenv("LAB_BMC_PASSWORD", "planted-bmc-password")
    text = (REPO / "examples" / "lab.yml").read_text(encoding="utf-8")
    old = 'address_pattern: "10.77.0.1:8{number:03d}"'
    assert old in text
    spec = tmp_path / "lab.yml"
    spec.write_text(text.replace(old, 'address_pattern: "http://10.77.0.1:8{number:03d}"'))
    runs = tmp_path / "runs"
    code = main(["reimage", str(spec), "--nodes", "gpu001", "--runs-dir", str(runs)])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--insecure-bmc" in err and "http" in err
    assert "planted-bmc-password" not in err
    assert not runs.exists() or not any(runs.iterdir()), "nothing is recorded for refused input"
