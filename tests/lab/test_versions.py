"""`cluster-tool versions` on the converged lab (issue 19): the version probe reads what every
node runs over SSH; a healthy lab keeps the spec and the compatibility matrix, and the
version-skew faults show up named with node and component, in `versions` and in `validate`, then
heal."""

from __future__ import annotations

from typing import Any

import pytest

from tests.lab.conftest import Converged


def versions(converged: Converged) -> tuple[int, dict[str, Any]]:
    rc, data, err = converged.run_json("versions", "--spec", str(converged.lab.spec), timeout=300)
    assert data, err[-2000:]
    return rc, data


def named(report: dict[str, Any]) -> list[tuple[str, str | None, str | None]]:
    return [(f["check"], f["node"], f["component"]) for f in report["findings"]]


@pytest.mark.converged
def test_version_skew_is_named_and_a_healthy_lab_reports_none(converged: Converged) -> None:
    rc, report = versions(converged)
    assert (rc, named(report)) == (0, [])
    rows = {(r["component"], r["version"]) for r in report["versions"]}
    assert ("fabricmanager", "570.172.08") in rows and ("doca", "3.1.0") in rows

    faults = [
        converged.inject("version-skew", "gpu002", "fabricmanager"),
        converged.inject("version-skew", "gpu003", "hca-fw", "mlx5_4"),
    ]
    try:
        rc, report = versions(converged)
        assert rc == 1
        assert named(report) == [
            ("version.incompatible", "gpu002", "fabricmanager"),
            ("version.outlier", "gpu003", "hca_firmware mlx5_4"),
        ]
        # validate judges the same probe, collected with the health probes: the same two,
        # the fabric manager an error (exit 1), the adapter a warning.
        rc, report, err = converged.run_json(
            "validate", str(converged.lab.spec), "--health", "--no-dcgm", timeout=600
        )
        judged = [
            (f["check"], f["node"], f["component"], f["severity"])
            for f in report.get("findings", [])
            if f["check"].startswith("version.")
        ]
        assert judged == [
            ("version.incompatible", "gpu002", "fabricmanager", "error"),
            ("version.outlier", "gpu003", "hca_firmware mlx5_4", "warning"),
        ], (rc, err[-2000:], report.get("findings"))
        assert rc == 1
    finally:
        converged.heal(*reversed(faults))
    rc, report = versions(converged)
    assert (rc, named(report)) == (0, [])
