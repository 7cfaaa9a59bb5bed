"""Issue 32: every parser of untrusted text runs in time linear in the length of a line.

For every parser, each kind of line of a real capture is made longer (a run of its own
character, of blanks before a stray character, of tabs, of one of its tokens, inserted at each
field boundary) and parsed at one length and at twice that. A pattern that backtracks
(`\\s*(.*?)\\s*$`, two neighbouring repeats over the same characters) takes about four times as
long per doubling; a linear one about twice. The test fails when the time grows by more than
2.5 per doubling: a ratio of two timings taken side by side in one run, not a wall-time
threshold. On a noisy shared machine a ratio is first screened on one timing each, and only a
suspect one is timed again at three lengths, the fastest of five runs each (noise only adds
time), and judged on its growth over two doublings.

The absolute figures (a 50 KB line in every parser) are printed by
`benchmarks/parser_long_lines.py`.
"""

from __future__ import annotations

import contextlib
import gc
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cluster_tool.errors import ParseError
from cluster_tool.parsers import KINDS
from tests.conftest import FIXTURES, REAL_OUTPUTS

PARSERS = FIXTURES / "parsers"
CAPTURED = Path(__file__).resolve().parents[1] / "gate" / "captured"

# One capture per parser kind (real ones where the project has them): its lines are the kinds.
SAMPLES: dict[str, Path] = {
    "dcgmi-diag": PARSERS / "nvidia" / "dcgmi_diag_dcgm3_r2_gpu0_thermal_fail.txt",
    "perfquery": PARSERS / "ib" / "perfquery_x_ibsim_switch_port.txt",
    "ibqueryerrors": PARSERS / "ib" / "ibqueryerrors_ndr_hand.txt",
    "iblinkinfo": PARSERS / "ib" / "iblinkinfo_ndr_quantum2_hand.txt",
    "ibnetdiscover": PARSERS / "ib" / "ibnetdiscover_ibsim_hdr.txt",
    "ibstat": REAL_OUTPUTS / "ibstat_h100_ib_active_some_eth_down.txt",
    "ibstat-p": PARSERS / "ib" / "ibstat_p_h100_8xcx7.txt",
    "ibstatus": REAL_OUTPUTS / "ibnetdiscover_qm9700_ndr200_hostname_mlx5_redacted.txt",
    "os-release": FIXTURES / "os-release" / "ubuntu-22.04.2.txt",
    "xid": PARSERS / "nvidia" / "kernel_log_xid_variants_hand_built.txt",
    "link-events": PARSERS / "real" / "journalctl_mlx5_link_up_repeated_eth1_prompt_line.txt",
    "lspci-vv": PARSERS / "real" / "lspci-vvv_cx7x4_gen5_x16_libkmod_warnings_command_line.txt",
    "mlxlink": PARSERS / "real" / "mlxlink_m_c_bf3_100g_dac_two_ports_prompt_lines.txt",
    "nccl-tests": REAL_OUTPUTS / "all_reduce_perf_h100_single_node_8gpu_nvls_nvidia_dgxc.txt",
    "nvidia-smi-query": PARSERS / "nvidia" / "nvidia-smi-query_h100x8_csv_header_units.txt",
    "nvidia-smi-q": REAL_OUTPUTS / "nvidia-smi-q_h100_ecc_retired_remapped_section.txt",
    "nvidia-smi-topo": PARSERS / "nvidia" / "nvidia-smi_topo-m_h100x4_nv6_spaces_nccl1617.txt",
    "nvidia-smi-nvlink": PARSERS / "nvidia" / "nvidia-smi-nvlink-s_a100x8_gpud.txt",
    "nvidia-smi-nvlink-errors": PARSERS
    / "real"
    / "nvidia-smi_nvlink-e_h100_elided_links_prompt_line.txt",
    "proc-mounts": FIXTURES / "storage" / "build-host-mounts-df.txt",
    "lscpu": PARSERS / "host" / "lscpu_xeon8481c_2x44_kvm_wrapped_flags.txt",
    "meminfo": PARSERS / "host" / "meminfo_2tib_head_prompt_line.txt",
    "ibdev2netdev": PARSERS / "host" / "ibdev2netdev-v_igx_cx7_two_ports_prompt_line.txt",
    "rdma-devices": PARSERS / "host" / "rdma-devices_dgx_h100_user_guide_hand_built.txt",
    "df-posix": FIXTURES / "storage" / "build-host-mounts-df.txt",
}

# The section of a sample its parser reads, where the capture holds more than one tool's output.
_SECTION = {"ibstatus": "ibstatus on an NDR200 port ----\n", "df-posix": "--- df -P -k -l\n"}
# The section a sample's parser reads, where it ends at another tool's output.
_UNTIL = {"proc-mounts": "--- df -P -k -l\n"}

# How many lines of a sample are taken, and how many kinds of line from it.
_HEAD = 60


def _text(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    return text.split("\n", 1)[1] if text.startswith("# source") else text


def _others() -> dict[str, tuple[Callable[[str], object], str]]:
    """Parsers of untrusted text outside the registry: Slurm's output, the probes' own lines."""
    from cluster_tool import slurm
    from cluster_tool.checks.nccl_env import parse_nccl_conf
    from cluster_tool.parsers.port_counters import parse_port_counters
    from cluster_tool.parsers.versions import parse_versions

    return {
        "scontrol-show-node": (
            slurm.parse_scontrol_nodes,
            (CAPTURED / "scontrol_show_node.txt").read_text(),
        ),
        "sinfo": (slurm.parse_sinfo_nodes, (CAPTURED / "sinfo_nodes.txt").read_text()),
        "squeue": (slurm.parse_squeue, (CAPTURED / "squeue.txt").read_text()),
        "sacct": (slurm.parse_sacct, (CAPTURED / "sacct.txt").read_text()),
        "squeue-running": (
            slurm.parse_squeue_running,
            "4106|gpu[001-002]|(null)|ckpt requeue\n4107|gpu003|h100|(null)\n",
        ),
        "versions": (
            parse_versions,
            "kernel 6.1.0-27-amd64\nmodule nvidia 550.127.08\nfabricmanager 550.127.08\n"
            "package libnccl2 2.21.5-1+cuda12.4\nhca mlx5_0 MT4129 28.43.2026 MT_0000000838\n",
        ),
        "port-counters": (
            parse_port_counters,
            "/sys/class/infiniband/mlx5_0/ports/1/counters/port_xmit_data 1500000000\n"
            "/sys/class/infiniband/mlx5_3/ports/1/counters/link_downed 3\n",
        ),
        "nccl.conf": (
            parse_nccl_conf,
            "# rendered\nNCCL_IB_HCA==mlx5_0,mlx5_1\nNCCL_SOCKET_IFNAME==eno1\n",
        ),
    }


def _cases() -> dict[str, tuple[Callable[[str], object], str]]:
    cases: dict[str, tuple[Callable[[str], object], str]] = {}
    for kind, path in SAMPLES.items():
        text = _text(path)
        if kind in _SECTION:
            text = text.split(_SECTION[kind], 1)[1]
        if kind in _UNTIL:
            text = text.split(_UNTIL[kind], 1)[0]
        cases[kind] = (KINDS[kind].read, text)
    return cases | _others()


def test_every_registered_parser_has_a_sample() -> None:
    assert set(SAMPLES) == set(KINDS)


def _shape(line: str) -> str:
    return re.sub(r"[A-Za-z]+", "a", re.sub(r"\d+", "0", line))


def _kinds_of_line(text: str) -> Iterator[tuple[list[str], str]]:
    """(the lines before it, the line) for the first line of each shape in the sample."""
    lines = text.splitlines()[:_HEAD]
    seen: set[str] = set()
    for i, line in enumerate(lines):
        shape = _shape(line)
        if line.strip() and shape not in seen:
            seen.add(shape)
            yield lines[:i], line


_BOUNDARY = re.compile(r"(?<=\S)\s|(?<=\s)\S|[:=\[\]\"(),|#/.-]")


def _growths(line: str) -> Iterator[tuple[str, Callable[[int], str]]]:
    """Ways to make the line `n` characters longer at each field boundary."""
    cuts = sorted({0, len(line)} | {m.start() for m in _BOUNDARY.finditer(line)})
    if len(cuts) > 9:
        cuts = [cuts[i * len(cuts) // 8] for i in range(8)] + [len(line)]
    for at in cuts:
        head, tail = line[:at], line[at:]
        own = tail[:1] or head[-1:] or "a"
        token = tail[: next((m.start() for m in _BOUNDARY.finditer(tail, 1)), len(tail))] or own
        yield f"own {own!r}*n at {at}", lambda n, h=head, t=tail, c=own: h + c * n + t
        yield f"blanks+x at {at}", lambda n, h=head, t=tail: h + " " * n + "x" + t
        yield f"tabs+# at {at}", lambda n, h=head, t=tail: h + "\t" * n + "#" + t
        yield f"'a '*n at {at}", lambda n, h=head, t=tail: h + "a " * (n // 2) + t
        yield (
            f"{token!r} repeated at {at}",
            lambda n, h=head, t=tail, k=token: h + k * (n // len(k)) + t,
        )


def _seconds(parse: Callable[[str], object], text: str, times: int = 1) -> float:
    # CPU time of this process: the time other processes on the shared machine take the
    # core is not counted (it is, wall-clock: often 8 ms at once, several times a second).
    gc.disable()
    try:
        start = time.process_time()
        for _ in range(times):
            # Refusing a line is fine; taking quadratic time to do it is not.
            with contextlib.suppress(ParseError):
                parse(text)
        return time.process_time() - start
    finally:
        gc.enable()


def _fastest(parse: Callable[[str], object], text: str, times: int, runs: int) -> float:
    # What noise is left (caches, the allocator) only ever adds time: the fastest of several
    # runs is the parser's own.
    return min(_seconds(parse, text, times) for _ in range(runs))


_GROWTH = 2.5
_SCREEN = 2_000
_LONG = 50_000
# A suspect is timed at three lengths, each run parsing it often enough to take a few
# milliseconds. Lengths stay small (16,000 characters) so that no cache limit is crossed
# between them, and the growth is taken over two doublings: a cache or allocator step
# makes one doubling look slow, a backtracking pattern makes both.
_CONFIRM = (4_000, 8_000, 16_000)
_RUN = 0.004


def _growth_per_doubling(parse: Callable[[str], object], make: Callable[[int], str]) -> float:
    texts = [make(n) for n in _CONFIRM]
    once = _fastest(parse, texts[0], 1, 3)
    times = max(1, min(100, int(_RUN / max(once, 1e-6))))
    first, _, last = (_fastest(parse, text, times, 5) for text in texts)
    return float((last / max(first, 1e-9)) ** 0.5)


@pytest.mark.parametrize("name", sorted(set(SAMPLES) | set(_others())))
def test_parse_time_grows_linearly_with_the_length_of_each_kind_of_line(name: str) -> None:
    parse, text = _cases()[name]
    for before, line in _kinds_of_line(text):
        for growth, grow in _growths(line):

            def make(n: int, before: list[str] = before, grow: Callable[[int], str] = grow) -> str:
                return "\n".join([*before, grow(n)]) + "\n"

            if growth.startswith("own "):
                # A 50 KB line is read or refused with a ParseError, never a crash (a long run
                # of digits made int() raise ValueError past 4,300 of them).
                _seconds(parse, make(_LONG))
            screen = _seconds(parse, make(2 * _SCREEN)) / max(_seconds(parse, make(_SCREEN)), 1e-9)
            if screen <= _GROWTH:
                continue
            ratio = min(_growth_per_doubling(parse, make) for _ in range(2))
            assert ratio <= _GROWTH, (
                f"{name}: the line {line[:70]!r} grown by {growth} takes {ratio:.1f}x as long "
                "when its length doubles (linear is about 2x)"
            )
