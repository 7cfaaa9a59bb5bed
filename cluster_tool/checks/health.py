"""Node health: a node's GPUs and compute HCAs held to its profile and the spec's thresholds.

Pure functions over parsed records (nvidia-smi -q, ibstat, the kernel log's Xids, dcgmi
diag). Finding ids: gpu.count, gpu.model, gpu.temperature, gpu.ecc-mode, gpu.ecc,
gpu.remapped-rows, gpu.retired-pages, gpu.xid, gpu.sxid, gpu.pcie, gpu.throttle,
gpu.persistence, gpu.fabric, gpu.reset, gpu.dcgm, gpu.dcgm-incomplete, ib.count, ib.state,
ib.rate, ib.link-layer; gpu.driver for an nvidia-smi that cannot reach the driver or a GPU.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence

from cluster_tool.findings import Finding, Severity
from cluster_tool.parsers.dcgmi import DcgmDiag
from cluster_tool.parsers.ibstat import IbstatCa
from cluster_tool.parsers.kernel_log import XidEvent
from cluster_tool.parsers.nvidia_smi import GpuInfo, NvidiaSmiReport
from cluster_tool.spec.models import NodeProfile
from cluster_tool.spec.thresholds import HealthThresholds

__all__ = [
    "XID_CLASSES",
    "check_dcgm",
    "check_gpus",
    "check_ibstat",
    "check_xids",
    "dcgm_incomplete",
    "driver_unreachable",
    "gpu_index",
    "xid_class",
]

# What an Xid means, from NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors).
XID_CLASSES: dict[int, str] = {
    13: "graphics engine exception (usually the application)",
    31: "GPU memory page fault (usually the application)",
    43: "GPU stopped processing (usually the application)",
    45: "preemptive cleanup after a previous error",
    48: "memory: double-bit ECC error",
    61: "firmware: internal micro-controller breakpoint",
    62: "firmware: internal micro-controller halt",
    63: "memory: ECC page retirement or row remap recorded",
    64: "memory: ECC page retirement or row remap failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "memory: high single-bit ECC error rate",
    94: "memory: contained ECC error",
    95: "memory: uncontained ECC error",
    109: "context switch timeout",
    119: "GSP: RPC timeout",
    120: "GSP: error in the GSP firmware",
    140: "memory: unrecovered ECC error",
    154: "GPU recovery action changed: reset or reboot required",
}


def xid_class(code: int) -> str:
    """What an Xid code means, in a few words."""
    return XID_CLASSES.get(code, "see NVIDIA's Xid catalogue")


def _gpu(index: int) -> str:
    return f"GPU{index}"


def _f(
    check: str,
    node: str,
    component: str | None,
    message: str,
    *,
    severity: Severity = "error",
    expected: object = None,
    observed: object = None,
) -> Finding:
    return Finding(
        check=check,
        severity=severity,
        node=node,
        component=component,
        expected=None if expected is None else str(expected),
        observed=None if observed is None else str(observed),
        message=f"{node} {component}: {message}" if component else f"{node}: {message}",
    )


# What nvidia-smi prints when it cannot reach the driver or a GPU: a state of the node, not a
# failure to read it. The texts as operators posted them: "NVIDIA-SMI has failed because it
# couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is
# installed and running." (github.com/ci-for-research/self-hosted-runners#40,
# GoogleCloudPlatform/compute-gpu-installation#33), "Failed to initialize NVML: Driver/library
# version mismatch" (a new driver installed, the old kernel module still loaded), "Unable to
# determine the device handle for GPU 0000:05:00.0: GPU is lost.  Reboot the system to recover
# this GPU". nvidia-smi exits with NVML's return code: 9 NVML_ERROR_DRIVER_NOT_LOADED,
# 15 NVML_ERROR_GPU_IS_LOST (nvmlReturn_t; nvidia-smi(1), RETURN VALUE).
_DRIVER_TEXTS = (
    (
        re.compile(r"couldn't communicate with the NVIDIA driver"),
        "cannot communicate with the NVIDIA driver (not loaded, or it failed)",
    ),
    (
        re.compile(r"Failed to initialize NVML: Driver/library version mismatch"),
        "the loaded NVIDIA kernel module is another version than the installed driver library",
    ),
    (
        re.compile(
            r"Unable to determine the device handle for GPU ?\d*:? ?"
            r"(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]): GPU is lost"
        ),
        "GPU {pci} is lost (fallen off the bus or otherwise inaccessible)",
    ),
)
_DRIVER_RCS = {
    9: "the NVIDIA driver is not loaded (exit 9)",
    15: "a GPU is lost (exit 15)",
}


def driver_unreachable(node: str, rc: int, stdout: str, stderr: str = "") -> Finding | None:
    """`gpu.driver` when nvidia-smi says it cannot reach the driver or a GPU (what it printed,
    or its exit status); None for any other outcome (a clean run, a tool that is missing, hung or
    failed for a reason that says nothing of the node's driver)."""
    if rc == 0 or rc in (124, 126, 127, 137):
        return None
    text = f"{stdout}\n{stderr}"
    said: list[str] = []
    for pattern, what in _DRIVER_TEXTS:
        for m in pattern.finditer(text):
            said.append(what.format(**m.groupdict()))
    if not said and rc in _DRIVER_RCS:
        said.append(_DRIVER_RCS[rc])
    if not said:
        return None
    why = "; ".join(dict.fromkeys(said))
    return _f(
        "gpu.driver",
        node,
        "nvidia-smi-q",
        f"nvidia-smi cannot reach the GPUs: {why}",
        expected="nvidia-smi talks to the driver",
        observed=f"exit {rc}: {why}",
    )


def check_gpus(
    node: str, profile: NodeProfile, thresholds: HealthThresholds, smi: NvidiaSmiReport
) -> list[Finding]:
    """GPU count and model, temperature, ECC, remapped rows, retired pages, PCIe link,
    clock slowdowns, persistence mode and (HGX) NVLink fabric state, per GPU."""
    out: list[Finding] = []
    gpus = list(smi.gpus)
    if len(gpus) != profile.gpu_count:
        missing = ""
        if profile.gpu_pci:
            seen = {g.pci for g in gpus}
            gone = [f"GPU{i} ({pci})" for i, pci in enumerate(profile.gpu_pci) if pci not in seen]
            missing = f"; missing: {', '.join(gone)}" if gone else ""
        out.append(
            _f(
                "gpu.count",
                node,
                None,
                f"nvidia-smi lists {len(gpus)} GPUs; the profile has {profile.gpu_count}" + missing,
                expected=profile.gpu_count,
                observed=len(gpus),
            )
        )
    for index, gpu in enumerate(gpus):
        out.extend(_check_gpu(node, gpu_index(profile, gpu, index), profile, thresholds, gpu))
    return out


def gpu_index(profile: NodeProfile, gpu: GpuInfo, position: int) -> int:
    """The GPU's index on its node: by PCI address in the profile, else its minor number."""
    # A GPU that fell off the bus shifts the others' positions: name GPUs by PCI address.
    if gpu.pci and gpu.pci in profile.gpu_pci:
        return profile.gpu_pci.index(gpu.pci)
    if gpu.minor_number is not None:
        return gpu.minor_number
    return position


def _check_gpu(
    node: str, index: int, profile: NodeProfile, t: HealthThresholds, gpu: GpuInfo
) -> list[Finding]:
    out: list[Finding] = []
    name = _gpu(index)

    def add(check: str, message: str, **kw: object) -> None:
        out.append(_f(check, node, name, message, **kw))  # type: ignore[arg-type]

    if gpu.product_name is not None and gpu.product_name != profile.gpu_product:
        add(
            "gpu.model",
            f"is a {gpu.product_name}; the profile has {profile.gpu_product}",
            expected=profile.gpu_product,
            observed=gpu.product_name,
        )
    temps = gpu.temperatures
    if temps is not None and temps.gpu_current_c is not None:
        c = temps.gpu_current_c
        if c >= t.gpu_temp_error_c:
            add(
                "gpu.temperature",
                f"{c} C, at or above the error limit {t.gpu_temp_error_c} C",
                expected=f"< {t.gpu_temp_error_c} C",
                observed=f"{c} C",
            )
        elif c >= t.gpu_temp_warn_c:
            add(
                "gpu.temperature",
                f"{c} C, at or above the warning limit {t.gpu_temp_warn_c} C",
                severity="warning",
                expected=f"< {t.gpu_temp_warn_c} C",
                observed=f"{c} C",
            )
    if gpu.ecc_mode_current is False:
        add("gpu.ecc-mode", "ECC is disabled", expected="Enabled", observed="Disabled")
    elif gpu.ecc_mode_pending is False and gpu.ecc_mode_current:
        add(
            "gpu.ecc-mode",
            "ECC is set to turn off at the next reset",
            severity="warning",
            expected="Enabled",
            observed="Disabled (pending)",
        )
    vol = gpu.ecc_volatile
    if vol is not None:
        if vol.uncorrectable is not None and vol.uncorrectable > t.ecc_uncorrectable_max:
            add(
                "gpu.ecc",
                f"volatile uncorrectable {vol.uncorrectable}",
                expected=f"<= {t.ecc_uncorrectable_max}",
                observed=vol.uncorrectable,
            )
        if vol.correctable is not None and vol.correctable > t.ecc_correctable_warn:
            add(
                "gpu.ecc",
                f"volatile correctable {vol.correctable}",
                severity="warning",
                expected=f"<= {t.ecc_correctable_warn}",
                observed=vol.correctable,
            )
        if vol.sram_threshold_exceeded:
            add("gpu.ecc", "SRAM ECC error threshold exceeded", observed="threshold exceeded")
    rows = gpu.remapped_rows
    if rows is not None:
        if rows.failure:
            add(
                "gpu.remapped-rows",
                "row remapping failed: the GPU needs replacing",
                expected="no failure",
                observed="failure",
            )
        if rows.pending and t.remapped_rows_pending_max == 0:
            add(
                "gpu.remapped-rows",
                "row remap pending: reset the GPU",
                expected="none pending",
                observed="pending",
            )
        if rows.uncorrectable and rows.uncorrectable > 0 and not rows.pending:
            add(
                "gpu.remapped-rows",
                f"{rows.uncorrectable} rows remapped for uncorrectable errors",
                severity="info",
                observed=rows.uncorrectable,
            )
    pages = gpu.retired_pages
    if pages is not None:
        if pages.pending:
            add(
                "gpu.retired-pages",
                "page retirement pending: reset the GPU",
                expected="none pending",
                observed="pending",
            )
        if pages.double_bit_ecc:
            add(
                "gpu.retired-pages",
                f"{pages.double_bit_ecc} pages retired for double-bit ECC errors",
                severity="warning",
                observed=pages.double_bit_ecc,
            )
    gen_max = gpu.pcie_gen_device_max or gpu.pcie_gen_max
    want_gen = min(x for x in (gen_max, t.gpu_pcie_gen) if x is not None)
    if gpu.pcie_gen_current is not None and gpu.pcie_gen_current < want_gen:
        add(
            "gpu.pcie",
            f"PCIe link at gen {gpu.pcie_gen_current}; expected gen {want_gen}",
            severity="warning",
            expected=f"gen {want_gen}",
            observed=f"gen {gpu.pcie_gen_current}",
        )
    want_width = min(x for x in (gpu.pcie_width_max, t.gpu_pcie_width) if x is not None)
    if gpu.pcie_width_current is not None and gpu.pcie_width_current < want_width:
        add(
            "gpu.pcie",
            f"PCIe link at x{gpu.pcie_width_current}; expected x{want_width}",
            expected=f"x{want_width}",
            observed=f"x{gpu.pcie_width_current}",
        )
    reasons = gpu.clock_event_reasons
    if reasons is not None:
        if reasons.hw_thermal_slowdown:
            add(
                "gpu.throttle",
                "HW thermal slowdown active (clocks held down by temperature)",
                expected="not active",
                observed="HW Thermal Slowdown",
            )
        others = [
            label
            for flag, label in (
                (reasons.hw_slowdown, "HW Slowdown"),
                (reasons.hw_power_brake_slowdown, "HW Power Brake Slowdown"),
                (reasons.sw_thermal_slowdown, "SW Thermal Slowdown"),
            )
            if flag
        ]
        if others:
            add(
                "gpu.throttle",
                f"{', '.join(others)} active",
                severity="warning",
                expected="not active",
                observed=", ".join(others),
            )
    if gpu.persistence_mode is False:
        add(
            "gpu.persistence",
            "persistence mode is off (nvidia-persistenced not running)",
            severity="warning",
            expected="Enabled",
            observed="Disabled",
        )
    # NVSwitch boards: Fabric Manager must have trained every GPU into the NVLink fabric.
    if profile.nvlink_domain_size > 1 and gpu.fabric is not None and gpu.fabric.state:
        fab = gpu.fabric
        if fab.state != "Completed" or (fab.status and fab.status != "Success"):
            add(
                "gpu.fabric",
                f"NVLink fabric state {fab.state}"
                + (f", status {fab.status}" if fab.status else "")
                + " (is nvidia-fabricmanager running?)",
                expected="Completed/Success",
                observed=f"{fab.state}/{fab.status}",
            )
    if gpu.reset_required:
        add("gpu.reset", "the driver asks for a GPU reset", expected="no", observed="yes")
    return out


def check_xids(
    node: str,
    profile: NodeProfile,
    thresholds: HealthThresholds,
    events: Sequence[XidEvent],
    gpu_pci: Sequence[str | None] = (),
) -> list[Finding]:
    """One finding per GPU and Xid code seen in the kernel log: the codes the spec calls
    fatal fail the node, the others (mostly application faults) are warnings."""
    pci_to_gpu: dict[str, int] = {}
    for i, pci in enumerate(profile.gpu_pci or ()):
        pci_to_gpu[pci] = i
    for i, seen_pci in enumerate(gpu_pci):
        if seen_pci is not None:
            pci_to_gpu.setdefault(seen_pci, i)
    counts: dict[tuple[str, str, int], int] = defaultdict(int)
    severities: dict[tuple[str, str, int], str | None] = {}
    for e in events:
        if e.detail:
            continue
        if e.kind == "xid":
            where = (
                _gpu(pci_to_gpu[e.pci])
                if e.pci is not None and e.pci in pci_to_gpu
                else f"GPU {e.pci_bus_id}"
            )
        else:
            where = e.device or f"NVSwitch {e.pci_bus_id}"
        key = (e.kind, where, e.code)
        counts[key] += 1
        severities.setdefault(key, e.severity)
    out: list[Finding] = []
    for (kind, where, code), n in sorted(counts.items()):
        times = f" ({n} times)" if n > 1 else ""
        if kind == "xid":
            fatal = code in thresholds.fatal_xids
            out.append(
                _f(
                    "gpu.xid",
                    node,
                    where,
                    f"Xid {code}{times}: {xid_class(code)}",
                    severity="error" if fatal else "warning",
                    expected="no Xid" if fatal else None,
                    observed=f"Xid {code}",
                )
            )
        else:
            sev = severities.get((kind, where, code))
            out.append(
                _f(
                    "gpu.sxid",
                    node,
                    where,
                    f"SXid {code}{times}" + (f" ({sev})" if sev else ""),
                    severity="error" if sev == "Fatal" else "warning",
                    observed=f"SXid {code}",
                )
            )
    return out


def check_ibstat(
    node: str,
    profile: NodeProfile,
    cas: Sequence[IbstatCa],
    *,
    names: Mapping[str, str] | None = None,
    accounted: Collection[str] = (),
) -> list[Finding]:
    """The profile's compute HCAs: present, port 1 Active/LinkUp, InfiniBand, at the
    profile's rate. Storage and management NICs are the profile's `nics` and never judged
    as rails; a CA the profile does not list is left to `profile.mismatch`. `names` are the
    node's names of profile HCAs it calls otherwise (judged under them), `accounted` the
    absent ones a `profile.mismatch` already names (checks/profile.match_hcas): not missing."""
    names = names or {}
    by_name = {ca.name: ca for ca in cas}
    out: list[Finding] = []
    rails = profile.compute_hcas
    present = [h for h in rails if names.get(h.device, h.device) in by_name]
    for hca in rails:
        if hca.device in accounted:
            continue
        # A renamed HCA is named as the node names it: what the operator finds there.
        label = names.get(hca.device, hca.device)
        ca = by_name.get(label)
        if ca is None:
            out.append(
                _f(
                    "ib.count",
                    node,
                    label,
                    f"rail-{hca.rail} HCA missing: ibstat lists {len(present)} of "
                    f"{len(rails)} compute HCAs",
                    expected="present",
                    observed="absent",
                )
            )
            continue
        port = ca.port(1) or (ca.ports[0] if ca.ports else None)
        if port is None:
            out.append(_f("ib.count", node, label, "no port", expected="1 port", observed="0"))
            continue
        if not port.is_infiniband:
            out.append(
                _f(
                    "ib.link-layer",
                    node,
                    label,
                    f"link layer {port.link_layer}; a compute rail must be InfiniBand",
                    expected="InfiniBand",
                    observed=port.link_layer,
                )
            )
        if not port.is_active:
            out.append(
                _f(
                    "ib.state",
                    node,
                    label,
                    f"rail-{hca.rail} port {port.state}/{port.physical_state}",
                    expected="Active/LinkUp",
                    observed=f"{port.state}/{port.physical_state}",
                )
            )
        elif port.rate_gbps < profile.expected_rate_gbps:
            out.append(
                _f(
                    "ib.rate",
                    node,
                    label,
                    f"rail-{hca.rail} rate {port.rate_gbps:g} Gb/s; expected "
                    f"{profile.expected_rate_gbps} ({profile.expected_width} "
                    f"{profile.expected_speed})",
                    expected=f"{profile.expected_rate_gbps} Gb/s",
                    observed=f"{port.rate_gbps:g} Gb/s",
                )
            )
    return out


def check_dcgm(node: str, diag: DcgmDiag, *, level: int = 1) -> list[Finding]:
    """DCGM diag verdicts: a failed test fails the node (per GPU when DCGM says which),
    a warning stays a warning; the test's own message is carried. A run that proved less than
    it was asked to (cut off, no test, everything skipped) is also `gpu.dcgm-incomplete`: the
    rows it did print are still judged, since a Fail there is real."""
    out: list[Finding] = []
    for test in diag.tests:
        verdict = test.verdict.lower()
        if verdict not in ("fail", "warn"):
            continue
        severity: Severity = "error" if verdict == "fail" else "warning"
        gpus = sorted(g for g, v in test.gpus.items() if v.lower() == verdict)
        text = "; ".join(m.text for m in test.messages if m.kind.lower() != "info")
        targets: list[str | None] = [_gpu(g) for g in gpus] or [None]
        for target in targets:
            out.append(
                _f(
                    "gpu.dcgm",
                    node,
                    target,
                    f"dcgmi diag {test.name}: {test.verdict}" + (f" ({text})" if text else ""),
                    severity=severity,
                    expected="Pass",
                    observed=test.verdict,
                )
            )
    gap = _dcgm_gap(diag, level)
    if gap is not None:
        component, observed, why = gap
        out.append(dcgm_incomplete(node, level, observed, why, component=component))
    return out


# DCGM's category of the checks every level runs (`-r 1` runs only these): the software
# deployment checks, which read the driver and libraries and load no GPU.
_DEPLOYMENT = "Deployment"


def _dcgm_gap(diag: DcgmDiag, level: int) -> tuple[str | None, str, str] | None:
    """(component, observed, why) when the run does not prove what `-r level` asks, else None."""
    if not diag.complete:
        last = diag.tests[-1].name if diag.tests else "the header"
        return (
            None,
            "cut off",
            f"the table ends after {last!r} without its closing border: the tests after it "
            "and their verdicts are unknown",
        )
    if not diag.tests:
        return None, "no test", "the table lists no test: nothing was diagnosed"
    if all(t.verdict == "Skip" for t in diag.tests):
        return (
            None,
            "every test Skip",
            f"every one of its {len(diag.tests)} tests was skipped: nothing was diagnosed",
        )
    beyond = [t for t in diag.tests if t.category != _DEPLOYMENT]
    if beyond and all(t.verdict == "Skip" for t in beyond):
        names = ", ".join(t.name for t in beyond)
        return (
            None,
            "every GPU test Skip",
            f"only the deployment checks ran; every GPU test was skipped ({names})",
        )
    if level >= 2 and not beyond:
        return (
            None,
            "deployment checks only",
            f"-r {level} was asked for and only the deployment checks ran",
        )
    # A GPU that every GPU test skipped while others were tested was not diagnosed.
    tested: dict[int, set[str]] = {}
    for t in beyond:
        for gpu, verdict in t.gpus.items():
            tested.setdefault(gpu, set()).add(verdict)
    skipped = sorted(g for g, verdicts in tested.items() if verdicts == {"Skip"})
    if skipped and len(skipped) < len(tested):
        return (
            ", ".join(_gpu(g) for g in skipped),
            "skipped by every GPU test",
            "every GPU test skipped it while the others were tested",
        )
    return None


def dcgm_incomplete(
    node: str, level: int, observed: str, why: str, *, component: str | None = None
) -> Finding:
    """`gpu.dcgm-incomplete`: the diagnostic did not prove what it was asked to, so the node's
    DCGM check did not run (its verdict is `unknown`, never `pass`)."""
    return _f(
        "gpu.dcgm-incomplete",
        node,
        component or "dcgmi-diag",
        f"dcgmi diag -r {level} did not diagnose the node completely: {why}",
        expected=f"a complete `dcgmi diag -r {level}` table with its tests run",
        observed=observed,
    )
