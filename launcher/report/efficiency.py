"""Two figures the report derives from goodput and the site: MFU on GPU sites, and the
checkpoint interval that the measured save cost and the job's fault rate suggest.

- MFU = model FLOPs per token x tokens/s / (GPUs x one GPU's peak). FLOPs per token is the
  formula of bench/anchors/torch_pp_baseline.py (6 x matmul parameters, blocks and LM head,
  plus the PaLM attention term 12 x layers x d x seq); the peak is the site's
  ``metrics.gpu_peak_tflops``, else the datasheet's dense bf16 figure of ``nodes.gpu_model``.
- Young/Daly: the interval between checkpoints that loses the least time is about
  sqrt(2 x C x MTBF), C the loop's mean time per checkpoint (goodput's checkpoint part /
  checkpoints), MTBF the job's observed time between failures (its time holding nodes, wall
  less queue, / its failed steps); before a failure, the site's ``metrics.node_mtbf_h`` / the
  job's nodes when set, else no suggestion.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.errors import UserInputError
from launcher.job_dir import REQUEST_FILE, SPEC_FILE
from launcher.job_spec import ModelSpec, load_job
from launcher.report.goodput import Goodput
from launcher.site_config import SiteConfig, load_site

DATASHEET_TFLOPS: tuple[tuple[str, float], ...] = (
    ("B200", 2250.0), ("H200", 989.4), ("H100", 989.4), ("A100", 312.0))
"""Dense bf16 TFLOP/s per GPU from NVIDIA's datasheets (SXM parts), by a word of the model
name the driver reports."""


def flops_per_token(model: ModelSpec) -> float:
    """Training FLOPs per token of the GPT model (forward + backward)."""
    layers, d = model.n_layer, model.n_embd
    return 6.0 * (layers * 12 * d * d + model.vocab_size * d) + 12.0 * layers * d * model.seq_len


def gpu_peak(site: SiteConfig) -> tuple[float | None, str]:
    """(peak TFLOP/s of one GPU, where it comes from); None on a CPU site or for an unknown
    model."""
    if site.metrics.gpu_peak_tflops is not None:
        return site.metrics.gpu_peak_tflops, "metrics.gpu_peak_tflops"
    if site.nodes.gpus_per_node <= 0 and site.build.backend != "cuda":
        return None, "a CPU site: no MFU"
    model = site.nodes.gpu_model or ""
    for word, tflops in DATASHEET_TFLOPS:
        if word in model.upper():
            return tflops, f"the {word} datasheet's dense bf16 peak"
    return None, (f"no peak known for GPU model {model!r}: set metrics.gpu_peak_tflops"
                  if model else "no nodes.gpu_model nor metrics.gpu_peak_tflops: no MFU")


@dataclass(frozen=True)
class Mfu:
    """Model FLOPs utilisation."""

    value: float | None
    """MFU (None without a peak)."""
    tflops_per_gpu: float
    """Achieved model TFLOP/s per GPU."""
    peak_tflops: float | None
    source: str
    """Where the peak came from, or why there is none."""

    def describe(self) -> str:
        if self.value is None:
            return f"- ({self.tflops_per_gpu:.1f} model TFLOP/s per GPU; {self.source})"
        return (f"{self.value:.1%} ({self.tflops_per_gpu:.1f} of {self.peak_tflops:g} TFLOP/s "
                f"per GPU, peak: {self.source})")

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def mfu(model: ModelSpec, tokens_per_s: float, gpus: int, site: SiteConfig) -> Mfu | None:
    """The MFU of a run at ``tokens_per_s`` (all replicas) on ``gpus`` GPUs; None on a CPU
    site (no GPUs)."""
    peak, source = gpu_peak(site)
    if peak is None and site.nodes.gpus_per_node <= 0 and site.build.backend != "cuda":
        return None
    achieved = flops_per_token(model) * tokens_per_s / max(gpus, 1) / 1e12
    return Mfu(None if peak is None else achieved / peak, achieved, peak, source)


@dataclass(frozen=True)
class CheckpointAdvice:
    """The Young/Daly checkpoint interval next to the configured one."""

    cost_s: float | None
    """C: the loop's mean seconds per checkpoint (None before the first)."""
    mtbf_s: float | None
    """The MTBF used (None: not enough data)."""
    mtbf_source: str
    interval_s: float | None
    """sqrt(2 C MTBF) (None without C or MTBF)."""
    interval_steps: int | None
    """The same in steps, at the median step time (at least 1)."""
    configured_steps: int
    """checkpoint.interval (0: only at the end and on a stop)."""

    def describe(self) -> str:
        configured = (f"configured every {self.configured_steps} steps"
                      if self.configured_steps else "configured: at the end only")
        if self.cost_s is None:
            return f"no checkpoint measured yet; {configured}"
        if self.interval_s is None:
            return (f"C {self.cost_s:.3f} s per checkpoint; {self.mtbf_source}; "
                    f"{configured}")
        return (f"every {self.interval_steps} steps ({self.interval_s:.0f} s: sqrt(2 x C "
                f"{self.cost_s:.3f} s x MTBF {self.mtbf_s:.0f} s, {self.mtbf_source}); "
                f"{configured}")

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def checkpoint_advice(goodput: Goodput, step_s: float | None, configured: int, nodes: int,
                      site: SiteConfig | None) -> CheckpointAdvice:
    """Young/Daly for this job; ``step_s``: the median step time, ``nodes``: the job's
    training nodes."""
    cost = goodput.mean_checkpoint_s
    parts = goodput.parts_us()
    held_s = (goodput.wall_us - parts["queue"]) / 1e6
    mtbf: float | None = None
    if goodput.failures:
        mtbf = held_s / goodput.failures
        source = (f"observed: {held_s:.0f} s holding nodes / {goodput.failures} failed "
                  "step(s)")
    elif site is not None and site.metrics.node_mtbf_h is not None:
        mtbf = site.metrics.node_mtbf_h * 3600 / max(nodes, 1)
        source = (f"no failure seen: the site's node MTBF {site.metrics.node_mtbf_h:g} h / "
                  f"{nodes} nodes")
    else:
        source = "no failure seen: not enough data (set metrics.node_mtbf_h for an estimate)"
    interval = math.sqrt(2 * cost * mtbf) if cost is not None and mtbf is not None else None
    steps = (max(1, round(interval / step_s)) if interval is not None and step_s
             else None)
    return CheckpointAdvice(cost, mtbf, source, interval, steps, configured)


@dataclass(frozen=True)
class JobEfficiency:
    """MFU and the checkpoint advice of one job, with what was missing."""

    mfu: Mfu | None
    """None on a CPU site or without the job's spec or site."""
    checkpoint: CheckpointAdvice
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"mfu": None if self.mfu is None else self.mfu.to_json(),
                "checkpoint_interval": self.checkpoint.to_json(), "notes": list(self.notes)}


def _median(values: list[float]) -> float | None:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else None


def job_efficiency(job_dir: Path, goodput: Goodput, tokens_per_s: list[float],
                   step_s: list[float]) -> JobEfficiency:
    """From the job directory's request.json (its site file, ranks, nodes) and spec.yaml (the
    model, checkpoint.interval); ``tokens_per_s`` and ``step_s``: per step of the
    trajectory."""
    notes: list[str] = []
    try:
        request = json.loads((job_dir / REQUEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        request = {}
    request = request if isinstance(request, dict) else {}
    site: SiteConfig | None = None
    if isinstance(request.get("site_path"), str):
        try:
            site = load_site(Path(request["site_path"])).config
        except UserInputError as err:
            notes.append(f"site: {err} (no MFU, no site MTBF)")
    else:
        notes.append(f"{REQUEST_FILE}: no site_path (no MFU, no site MTBF)")
    spec = None
    try:
        spec = load_job(job_dir / SPEC_FILE)
    except UserInputError as err:
        notes.append(f"{SPEC_FILE}: {err} (no MFU)")
    ranks = request.get("ranks") if isinstance(request.get("ranks"), int) else None
    per_node = request.get("ranks_per_node") if isinstance(request.get("ranks_per_node"),
                                                           int) else None
    nodes = ranks // per_node if ranks and per_node else 1
    tokens = _median(tokens_per_s)
    result = None
    if site is not None and spec is not None and spec.command is None and tokens is not None:
        result = mfu(spec.model, tokens, ranks or 1, site)
    configured = spec.checkpoint.interval if spec is not None else 0
    advice = checkpoint_advice(goodput, _median(step_s), configured, nodes, site)
    return JobEfficiency(result, advice, tuple(notes))
