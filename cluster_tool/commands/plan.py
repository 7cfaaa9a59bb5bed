"""`cluster-tool plan`: parallel layouts for a model on a validated cluster, and how to launch."""

import math
import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cluster_tool import output
from cluster_tool.bounds import MAX_HOSTS, check_count
from cluster_tool.commands._shape import SpecOptionCommand
from cluster_tool.errors import EXIT_CHECKS_FAILED, UsageError
from cluster_tool.plan.model import FLOPS_CONVENTIONS, PRESETS

if TYPE_CHECKING:
    from cluster_tool.plan import Assumptions, ClusterShape, Layout, ModelSpec, Training

# The stated error, printed with every plan (benchmarks/planner_fit.py on the held-out rows).
MODEL_ERROR_TEXT = "held-out MFU error 5.7 % mean, 23 % worst"

# The default global batch: about 4M tokens, Llama 3's starting batch (Dubey et al. 2024, 3.4.1).
DEFAULT_BATCH_TOKENS = 4 * 1024 * 1024

# What each whole-number option may be: at least 1, and no more than any model or cluster
# planned today by a wide margin (GPT-3 has 96 layers and 96 heads, Llama 3 405B a 16,384
# hidden size and 128K context); past these the search would run for hours, not plan.
_COUNT_LIMITS = {
    "--layers": 4096,
    "--hidden": 1 << 20,
    "--heads": 4096,
    "--kv-heads": 4096,
    "--ffn": 1 << 22,
    "--vocab": 1 << 24,
    "--seq": 1 << 24,
    "--global-batch": 1 << 24,
    "--micro-batch": 1 << 24,
    "--nodes": MAX_HOSTS,
    "--nodes-per-su": MAX_HOSTS,
    "--top": 1000,
    "--experts": 4096,
    "--top-k": 4096,
    "--moe-ffn": 1 << 22,
}


def _check_arguments(counts: dict[str, int | None], fractions: dict[str, float | None]) -> None:
    """Every count at least 1 and under its limit, every fraction in (0, 1], --params and
    --peak-tflops positive: a one-line UsageError naming the option,
    where a zero would have been taken as "not given" or a huge value would never finish."""
    for flag, value in counts.items():
        if value is not None:
            check_count(value, flag, 1, _COUNT_LIMITS[flag])
    for flag, number in fractions.items():
        if number is None:
            continue
        low_ok = number > 0
        if flag in ("--params", "--peak-tflops"):
            if not (number > 0 and math.isfinite(number)):
                raise UsageError(f"{flag} {number}: must be a positive number")
        elif not (low_ok and number <= 1):
            raise UsageError(f"{flag} {number}: must be a fraction between 0 and 1")


def _model(
    name: str | None,
    params: float | None,
    layers: int | None,
    hidden: int | None,
    heads: int | None,
    kv_heads: int | None,
    ffn: int | None,
    vocab: int | None,
    seq: int | None,
    mlp: str | None = None,
    experts: int | None = None,
    top_k: int | None = None,
    moe_ffn: int | None = None,
) -> "ModelSpec":
    from cluster_tool.plan import ModelSpec, preset

    if mlp is not None and mlp not in ("gated", "plain"):
        raise UsageError(f"--mlp {mlp!r}: gated (SwiGLU) or plain (GeLU, squared ReLU)")
    if name:
        shape = [f for f, v in (("--mlp", mlp), ("--experts", experts)) if v is not None]
        if shape:
            raise UsageError(f"{', '.join(shape)} describe a custom model, not --model {name}")
        model = preset(name)
        if seq:
            model = model.with_seq(seq)
        if params:
            model = replace(model, params_override=params * 1e9)
        return model
    missing = [
        flag
        for flag, value in (("--layers", layers), ("--hidden", hidden), ("--heads", heads))
        if value is None
    ]
    if missing:
        raise UsageError(f"give --model PRESET or a shape; missing {', '.join(missing)}")
    assert layers and hidden and heads
    return ModelSpec(
        "custom",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads or heads,
        # Llama's SwiGLU: 8h/3 rounded up to 256 (the same weights as a plain MLP of 4h).
        ffn=ffn or (4 * hidden if mlp == "plain" else -(-8 * hidden // (3 * 256)) * 256),
        vocab=vocab or 128256,
        seq=seq or 8192,
        params_override=params * 1e9 if params else None,
        gated_mlp=mlp != "plain",
        experts=experts or 0,
        top_k=(top_k or (2 if experts else 0)),
        moe_ffn=moe_ffn or 0,
    )


def _cluster(
    spec: Path | None, nodes: int | None, gpu: str | None, nodes_per_su: int | None
) -> "ClusterShape":
    from cluster_tool.plan import GPUS, ClusterShape

    if spec is not None:
        from cluster_tool.spec import load_spec

        # The spec says the nodes, GPUs and SUs: a what-if option beside it would be ignored.
        given = [
            flag
            for flag, value in (
                ("--nodes", nodes),
                ("--gpu", gpu),
                ("--nodes-per-su", nodes_per_su),
            )
            if value is not None
        ]
        if given:
            raise UsageError(
                f"{', '.join(given)}: a what-if cluster's, not with --spec (the spec says its "
                "nodes, GPUs and SUs; --drained leaves nodes out)"
            )
        return ClusterShape.from_spec(load_spec(spec))
    if nodes is None:
        raise UsageError("give --spec FILE (or --nodes N for a what-if cluster)")
    gpu = gpu or "h100"
    nodes_per_su = nodes_per_su or 32
    if gpu not in GPUS:
        raise UsageError(f"unknown GPU {gpu!r}; one of: {', '.join(sorted(GPUS))}")
    return ClusterShape.synthetic(nodes=nodes, nodes_per_su=nodes_per_su, gpu=gpu)


def plan_command(
    spec: Annotated[
        Path | None, typer.Option("--spec", help="Cluster spec (nodes, SUs, node profile).")
    ] = None,
    model_name: Annotated[
        str | None,
        typer.Option("--model", help=f"Preset: {', '.join(sorted(PRESETS))}."),
    ] = None,
    params: Annotated[
        float | None, typer.Option("--params", help="Parameters, billions (overrides count).")
    ] = None,
    layers: Annotated[int | None, typer.Option("--layers", help="Transformer layers.")] = None,
    hidden: Annotated[int | None, typer.Option("--hidden", help="Hidden size.")] = None,
    heads: Annotated[int | None, typer.Option("--heads", help="Attention heads.")] = None,
    kv_heads: Annotated[
        int | None, typer.Option("--kv-heads", help="Key/value heads (GQA); default = heads.")
    ] = None,
    ffn: Annotated[
        int | None, typer.Option("--ffn", help="FFN size (SwiGLU); default 8h/3 up to 256.")
    ] = None,
    vocab: Annotated[int | None, typer.Option("--vocab", help="Vocabulary size.")] = None,
    mlp: Annotated[
        str | None,
        typer.Option("--mlp", help="Custom model's MLP: gated (SwiGLU) or plain (GeLU)."),
    ] = None,
    experts: Annotated[
        int | None, typer.Option("--experts", help="Custom MoE: experts per layer.")
    ] = None,
    top_k: Annotated[
        int | None, typer.Option("--top-k", help="Custom MoE: experts per token (default 2).")
    ] = None,
    moe_ffn: Annotated[
        int | None, typer.Option("--moe-ffn", help="Custom MoE: FFN size of one expert.")
    ] = None,
    seq: Annotated[int | None, typer.Option("--seq", help="Sequence length.")] = None,
    global_batch: Annotated[
        int | None,
        typer.Option("--global-batch", help="Sequences per step; default ~4M tokens."),
    ] = None,
    micro_batch: Annotated[
        int | None, typer.Option("--micro-batch", help="Sequences per micro-batch; default: best.")
    ] = None,
    precision: Annotated[str, typer.Option("--precision", help="bf16 or fp8.")] = "bf16",
    zero: Annotated[str, typer.Option("--zero", help="ZeRO stage 0|1|2|3 or fsdp.")] = "1",
    recompute: Annotated[
        str, typer.Option("--recompute", help="Activation recomputation: none|selective|full.")
    ] = "selective",
    grad_dtype: Annotated[
        str, typer.Option("--grad-dtype", help="Gradients kept and reduced in fp32 or bf16.")
    ] = "fp32",
    optimizer_dtype: Annotated[
        str, typer.Option("--optimizer-dtype", help="Adam's moments in fp32 or bf16.")
    ] = "fp32",
    gate_results: Annotated[
        Path | None,
        typer.Option("--gate-results", help="Gate results JSON: measured busbw, drained nodes."),
    ] = None,
    drained: Annotated[
        str | None, typer.Option("--drained", help="Hostlist of nodes to leave out.")
    ] = None,
    nodes: Annotated[
        int | None, typer.Option("--nodes", help="What-if: a uniform cluster of N nodes.")
    ] = None,
    gpu: Annotated[
        str | None, typer.Option("--gpu", help="What-if GPU: h100 (default), h200, a100.")
    ] = None,
    nodes_per_su: Annotated[
        int | None, typer.Option("--nodes-per-su", help="What-if SU size (default 32).")
    ] = None,
    tp_overlap: Annotated[
        bool,
        typer.Option(
            "--tp-overlap/--no-tp-overlap",
            help="Megatron --tp-comm-overlap (userbuffers) where TP > 1.",
        ),
    ] = True,
    cp_comm: Annotated[
        str,
        typer.Option(
            "--cp-comm",
            help="How context parallelism moves K and V (Megatron --cp-comm-type): "
            "p2p (the ring, beside attention) | allgather (gathered before attention).",
        ),
    ] = "p2p",
    flops_convention: Annotated[
        str,
        typer.Option(
            "--flops-convention",
            help="How MFU counts FLOPs per token: "
            + " | ".join(FLOPS_CONVENTIONS)
            + " (full: 6P + 12·L·h·s; causal: attention halved).",
        ),
    ] = "full",
    peak_tflops: Annotated[
        float | None, typer.Option("--peak-tflops", help="Override the GPU's peak TFLOP/s.")
    ] = None,
    layout: Annotated[
        str | None,
        typer.Option(
            "--layout",
            help="Estimate this layout instead of searching: TP,PP,CP,DP[,VP][,MBS].",
        ),
    ] = None,
    top: Annotated[int, typer.Option("--top", help="How many layouts to show.")] = 5,
    hostfile: Annotated[
        Path | None,
        typer.Option("--hostfile", help="Write the best layout's hostfile (node-rank order)."),
    ] = None,
    sharp: Annotated[
        bool | None,
        typer.Option(
            "--sharp/--no-sharp",
            help="The run wants SHARP: its launch exports NCCL_COLLNET_ENABLE=1 (default: the "
            "spec's fabric.sharp; nccl.conf leaves CollNet off for every job).",
        ),
    ] = None,
    sbatch: Annotated[
        Path | None,
        typer.Option(
            "--sbatch",
            help="Write a resumable Slurm job for the best (or --layout's) layout: checkpoints "
            "on local scratch synced to the shared filesystem, requeue on SIGUSR1 (needs --spec).",
        ),
    ] = None,
    run_name: Annotated[
        str | None,
        typer.Option("--run-name", help="--sbatch: the run's name (its checkpoint folder)."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine output on stdout.")] = False,
) -> int:
    """Plan TP × CP × PP × DP for a model on the cluster; print the best layouts, launch flags."""
    from cluster_tool.plan import (
        Assumptions,
        Layout,
        Training,
        parse_hostlist,
        plan,
        plan_json,
        read_gate_results,
    )

    _check_arguments(
        {
            "--layers": layers,
            "--hidden": hidden,
            "--heads": heads,
            "--kv-heads": kv_heads,
            "--ffn": ffn,
            "--vocab": vocab,
            "--seq": seq,
            "--global-batch": global_batch,
            "--micro-batch": micro_batch,
            "--nodes": nodes,
            "--nodes-per-su": nodes_per_su,
            "--top": top,
            "--experts": experts,
            "--top-k": top_k,
            "--moe-ffn": moe_ffn,
        },
        {
            "--params": params,
            "--peak-tflops": peak_tflops,
        },
    )
    given = Layout.parse(layout) if layout is not None else None
    if sbatch is not None and spec is None:
        raise UsageError("--sbatch needs --spec: the job's storage and NCCL come from the spec")
    run = _run_name(run_name or model_name or "custom")
    model = _model(
        model_name,
        params,
        layers,
        hidden,
        heads,
        kv_heads,
        ffn,
        vocab,
        seq,
        mlp,
        experts,
        top_k,
        moe_ffn,
    )
    cluster = _cluster(spec, nodes, gpu, nodes_per_su)
    if gate_results is not None:
        gate = read_gate_results(gate_results, gpus_per_node=cluster.gpus_per_node)
        cluster = cluster.with_busbw(
            fabric=gate.fabric_busbw_gbs,
            nvlink=gate.nvlink_busbw_gbs,
            source=str(gate_results),
            fabric_curve=gate.fabric_curve,
            nvlink_curve=gate.nvlink_curve,
            fabric_curve_nodes=gate.fabric_curve_nodes,
        )
        known = {n.name for n in cluster.nodes}
        cluster = cluster.with_drained(n for n in gate.drained if n in known)
    if drained:
        cluster = cluster.with_drained(parse_hostlist(drained, "--drained"))
    if given is not None and micro_batch is not None and given.micro_batch != micro_batch:
        raise UsageError(
            f"--micro-batch {micro_batch} and --layout's MBS {given.micro_batch} differ"
        )
    training = Training(
        global_batch=global_batch or max(1, DEFAULT_BATCH_TOKENS // model.seq),
        micro_batch=given.micro_batch if given is not None else micro_batch,
        precision=precision,
        zero=zero,
        recompute=recompute,
        grad_dtype=grad_dtype,
        optimizer_dtype=optimizer_dtype,
    )
    assumptions = Assumptions(
        tp_overlap=tp_overlap,
        peak_tflops=peak_tflops,
        flops_convention=flops_convention,
        cp_comm=cp_comm,
    )
    if sharp is None:
        sharp = False
        if spec is not None:
            from cluster_tool.spec import load_spec

            sharp = load_spec(spec).fabric.sharp
    job = None if sbatch is None or spec is None else (sbatch, spec, run)
    if given is not None:
        return _layout_mode(
            model, cluster, training, assumptions, given, hostfile, json_out, job, sharp=sharp
        )
    result = plan(model, cluster, training, assumptions)
    doc = plan_json(model, cluster, training, assumptions, result, top=top, sharp=sharp)
    if hostfile is not None and doc["layouts"]:
        _write_hostfile(hostfile, doc["layouts"][0]["placement"]["hostfile"])
    if job is not None and doc["layouts"]:
        _write_sbatch(job, doc, doc["layouts"][0])
    if json_out:
        output.emit_json(doc)
    else:
        _print(doc)
    if not result.layouts:
        output.error_line(_nothing_fits(doc))
        return EXIT_CHECKS_FAILED
    return 0


def _layout_mode(
    model: "ModelSpec",
    cluster: "ClusterShape",
    training: "Training",
    assumptions: "Assumptions",
    given: "Layout",
    hostfile: Path | None,
    json_out: bool,
    job: tuple[Path, Path, str] | None = None,
    *,
    sharp: bool = False,
) -> int:
    """`--layout`: estimate the given layout; exit 1 (and say by how much) when it does not fit."""
    from cluster_tool.plan.report import layout_doc
    from cluster_tool.plan.search import estimate_layout

    est = estimate_layout(model, cluster, training, given, assumptions)
    doc = layout_doc(model, cluster, training, assumptions, est, sharp=sharp)
    if hostfile is not None and doc["fits"]:
        _write_hostfile(hostfile, doc["layout"]["placement"]["hostfile"])
    if job is not None and doc["fits"]:
        _write_sbatch(job, doc, doc["layout"])
    if json_out:
        output.emit_json(doc)
    else:
        _print_header(doc)
        _print_one_layout(doc)
    if not doc["fits"]:
        output.error_line(f"the layout does not fit in memory: {doc['why_not']}")
        return EXIT_CHECKS_FAILED
    return 0


def _write_hostfile(path: Path, hosts: list[str]) -> None:
    # Atomically: a launcher never reads a half-written hostfile. Readable by the launcher's
    # other users as before: a hostfile holds node names, not secrets.
    from cluster_tool.fileio import atomic_write

    atomic_write(path, "".join(f"{host}\n" for host in hosts), mode=0o644)


_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def _run_name(name: str) -> str:
    """A run's name becomes a folder and a job name: letters, digits, `_.-`."""
    if not _RUN_NAME.fullmatch(name):
        raise UsageError(f"--run-name {name!r}: letters, digits, `_`, `.`, `-` (64 at most)")
    return name


def _write_sbatch(job: tuple[Path, Path, str], doc: dict, lay: dict) -> None:
    """The resumable job for `lay`, written atomically: sbatch never reads half a script."""
    from cluster_tool.fileio import atomic_write
    from cluster_tool.plan.sbatch import sbatch_script
    from cluster_tool.render.engine import nccl_environment
    from cluster_tool.spec import load_spec

    path, spec, run = job
    cluster = load_spec(spec)
    title = (
        f"{doc['model']['name']}: TP {lay['tp']} x CP {lay['cp']} x PP {lay['pp']} x DP "
        f"{lay['dp']} on {lay['placement']['nodes']} nodes (cluster-tool plan)"
    )
    text = sbatch_script(
        cluster,
        run=run,
        hostfile=lay["placement"]["hostfile"],
        gpus_per_node=doc["cluster"]["gpus_per_node"],
        megatron_args=doc["launch"]["megatron_args"],
        title=title,
        # The cluster's nccl.conf, and what this run exports beside it (CollNet for SHARP).
        env={**nccl_environment(cluster), **dict(e.split("=", 1) for e in doc["launch"]["env"])},
    )
    atomic_write(path, text, mode=0o644)


def _nothing_fits(doc: dict) -> str:
    misfit = doc.get("closest_misfit")
    if not misfit:
        return "no layout lines up with the usable nodes and the global batch"
    return (
        f"no layout fits in memory; the lightest, TP {misfit['tp']} PP {misfit['pp']} "
        f"DP {misfit['dp']} CP {misfit['cp']}, needs {misfit['memory_per_gpu_gib']} GiB per GPU "
        f"of {misfit['memory']['usable_gib']} usable (try --zero 3, --recompute full, more nodes)"
    )


def _print_header(doc: dict) -> None:
    from rich.text import Text

    console = output.stdout
    m, c, tr = doc["model"], doc["cluster"], doc["training"]
    console.print(
        Text.assemble(
            (str(m["name"]), "bold"),
            f" {m['params'] / 1e9:.1f}B params, seq {m['seq']}, "
            f"global batch {tr['global_batch']} ({tr['precision']}, ZeRO {tr['zero']}, "
            f"recompute {tr['recompute']})",
        )
    )
    drained = f", drained {c['drained']}" if c["drained"] else ""
    console.print(
        f"{c['usable_nodes']}/{c['nodes']} nodes × {c['gpus_per_node']} {c['gpu']} "
        f"({c['hbm_gib']:.0f} GiB){drained}; fabric busbw {c['fabric_busbw_gbs']:.0f} GB/s, "
        f"NVLink {c['nvlink_busbw_gbs']:.0f} GB/s ({c['busbw_source']})"
    )


def _print(doc: dict) -> None:
    from rich import box
    from rich.table import Table

    console = output.stdout
    _print_header(doc)
    if not doc["layouts"]:
        return
    table = Table(
        title=f"Top {len(doc['layouts'])} of {doc['feasible']} layouts that fit",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    moe = bool(doc["model"]["experts"])
    for col in (
        "#",
        "TP×CP×PP×DP",
        *(("EP",) if moe else ()),
        "VP",
        "mbs",
        "bubble",
        "GiB",
        "step s",
        "MFU",
        "TFLOP/s",
        "nodes",
    ):
        table.add_column(col, justify="right", no_wrap=True)
    for i, lay in enumerate(doc["layouts"], 1):
        table.add_row(
            str(i),
            f"{lay['tp']}×{lay['cp']}×{lay['pp']}×{lay['dp']}",
            *((str(lay["ep"]),) if moe else ()),
            str(lay["vp"]),
            str(lay["micro_batch"]),
            f"{lay['bubble']:.1%}",
            f"{lay['memory_per_gpu_gib']:.1f}",
            f"{lay['step_time_s']:.2f}",
            f"{lay['mfu']:.1%}",
            f"{lay['achieved_tflops_per_gpu']:.0f}",
            str(lay["placement"]["nodes"]),
        )
    console.print(table)
    _print_launch(doc, doc["layouts"][0], "Best:")


def _print_one_layout(doc: dict) -> None:
    """`--layout`: where the memory and the step time of the one layout go."""
    console = output.stdout
    lay = doc["layout"]
    mem = lay["memory"]
    verdict = (
        f"fits, {mem['margin_gib']:.1f} GiB to spare"
        if doc["fits"]
        else f"does NOT fit: {doc['why_not']}"
    )
    console.print(
        f"Layout TP {lay['tp']} × CP {lay['cp']} × PP {lay['pp']} × DP {lay['dp']}, EP "
        f"{lay['ep']}, VP "
        f"{lay['vp']}, micro-batch {lay['micro_batch']} ({lay['microbatches']} per step), "
        f"stages {'/'.join(str(n) for n in lay['stage_layers'])}",
        markup=False,
    )
    console.print(
        f"Memory per GPU: weights {mem['weights_gib']:.1f} + gradients "
        f"{mem['gradients_gib']:.1f} + optimizer {mem['optimizer_gib']:.1f} + activations "
        f"{mem['activations_gib']:.1f} = {lay['memory_per_gpu_gib']:.1f} GiB of "
        f"{mem['usable_gib']:.1f} usable: {verdict}",
        markup=False,
    )
    t = lay["time_s"]
    console.print(
        f"Step {lay['step_time_s']:.3f} s: compute {t['compute']:.3f}, exposed TP "
        f"{t['tp_comm_exposed']:.3f}, CP {t['cp_comm_exposed']:.3f}, EP "
        f"{t['ep_comm_exposed']:.3f}, PP {t['pp_comm_exposed']:.3f}, pipeline fill and drain "
        f"{t['bubble']:.3f} ({lay['bubble']:.1%}), DP {t['dp_comm_exposed']:.3f}, optimizer "
        f"{t['optimizer']:.3f}",
        markup=False,
    )
    for o in lay["overlap"]:
        console.print(
            f"  {o['kind'].upper()}: {o['total_s']:.3f} s, {o['exposed_s']:.3f} s exposed: "
            f"{o['reason']}",
            markup=False,
        )
    console.print(
        f"MFU {lay['mfu']:.1%}, {lay['achieved_tflops_per_gpu']:.0f} TFLOP/s per GPU, "
        f"{lay['tokens_per_s']:.0f} tokens/s",
        markup=False,
    )
    for note in lay["notes"]:
        console.print(f"note: {note}", markup=False)
    if doc["fits"]:
        _print_launch(doc, lay, "Launch:")


def _print_launch(doc: dict, lay: dict, title: str) -> None:
    from rich.text import Text

    console = output.stdout
    pl = lay["placement"]
    console.print(
        Text.assemble(
            (title, "bold"),
            f" TP {lay['tp']} (in a node) × CP {lay['cp']} × PP {lay['pp']} "
            f"(stages {'/'.join(str(n) for n in lay['stage_layers'])}) × DP {lay['dp']}"
            f" on {pl['nodes']} nodes; pipelines whole in one SU: "
            + _whole(pl)
            + (f"; idle {pl['idle_nodes']}" if pl["idle_nodes"] else ""),
        )
    )
    hosts = pl["hostfile"]
    shown = " ".join(hosts) if len(hosts) <= 16 else " ".join(hosts[:12]) + f" … ({len(hosts)})"
    console.print(f"hostfile (node rank order): {shown}", markup=False)
    console.print("Megatron-LM:", markup=False)
    console.print("  " + " \\\n  ".join(doc["launch"]["megatron_args"]), markup=False)
    console.print("torchrun (NODE_RANK = the node's line in the hostfile, from 0):", markup=False)
    env = " ".join(doc["launch"].get("env") or [])
    console.print(
        "  " + (f"{env} " if env else "") + "torchrun " + " ".join(doc["launch"]["torchrun_args"]),
        markup=False,
    )
    a = doc["assumptions"]
    console.print(
        f"Model: fitted on published H100 runs ({MODEL_ERROR_TEXT}, docs/planner.md); TP "
        f"overlap {'on' if a['tp_overlap'] else 'off'}; {a['reserved_gib']:.1f} GiB reserved "
        f"per GPU; MFU by the {a['flops_convention']} FLOP convention.",
        markup=False,
    )


def _whole(placement: dict) -> str:
    if placement["pp_chains_whole_in_su"]:
        return "yes"
    return f"no, {placement['pp_pairs_across_su']} pipeline pairs cross SUs"


def register(app: typer.Typer) -> None:
    app.command(
        "plan",
        cls=SpecOptionCommand,
        help="Plan TP × CP × PP × DP layouts, rank placement and launch flags.",
    )(plan_command)
