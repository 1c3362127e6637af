"""SM clocks, power and throttle reasons of the GPUs while a benchmark runs, in its JSON.

H200s under a full training step run against their power limit (the driver's SW power cap
lowers the SM clock); a trainer that idles more runs at higher clocks. So a tokens/s figure
means more with the clocks it ran at. `ClockSampler` polls `nvidia-smi` (``GANTRY_NVIDIA_SMI``
overrides its path, as for preflight) every 100 ms in the background and summarizes, per GPU,
the samples in which the GPU was busy (utilization >= 90%): mean SM clock, mean power, and the
share of samples with the power cap (SW power cap or HW power brake) or a thermal slowdown
active. Without nvidia-smi it records nothing and the benchmark runs as before.

    python3 bench/gpu_clocks.py -- torchrun ... bench/anchors/torch_pp_baseline.py ...

runs the command with the sampler and passes its stdout through, adding ``"gpu_clocks"`` to each
line that is a JSON object (how run_gpu_bench.sh records the PyTorch anchor's clocks);
bench_gantry_gpu.py samples its own runs.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launcher.preflight.nvsmi_parse import CLOCK_EVENT_BITS, to_float, to_int
from launcher.slurm.tools import tool_path

QUERY = "index,utilization.gpu,clocks.sm,power.draw,clocks_event_reasons.active"
"""The nvidia-smi fields of one sample, in this order."""

BUSY_UTILIZATION = 90
"""Samples below this GPU utilization (%) are start-up, tuning or idle: left out."""

POWER_CAP_BITS = CLOCK_EVENT_BITS["sw_power_cap"] | CLOCK_EVENT_BITS["hw_power_brake_slowdown"]
"""clocks_event_reasons bits that mean the power limit holds the clock down."""

THERMAL_BITS = CLOCK_EVENT_BITS["sw_thermal_slowdown"] | CLOCK_EVENT_BITS["hw_thermal_slowdown"]
"""clocks_event_reasons bits of a thermal slowdown."""


def summarize(lines: Sequence[str]) -> list[dict[str, Any]]:
    """Per GPU (by index), the busy samples of `lines` (nvidia-smi CSV rows of QUERY, no header,
    no units): how many, mean SM clock (MHz), mean power (W), the shares with the power cap or
    a thermal slowdown active. Rows that do not parse are skipped; GPUs never busy are left out."""
    busy: dict[int, list[tuple[float, float, int]]] = {}
    for line in lines:
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 5 or not fields[0].isdigit():
            continue
        util, clock, power = (to_float(f) for f in fields[1:4])  # "[N/A]" -> None
        reasons = to_int(fields[4])
        if (util is None or clock is None or power is None or reasons is None
                or util < BUSY_UTILIZATION):
            continue
        busy.setdefault(int(fields[0]), []).append((clock, power, reasons))
    return [{"index": index, "busy_samples": len(rows),
             "sm_mhz_mean": round(statistics.fmean(r[0] for r in rows)),
             "power_w_mean": round(statistics.fmean(r[1] for r in rows)),
             "power_capped_share": round(sum(1 for r in rows if r[2] & POWER_CAP_BITS)
                                         / len(rows), 2),
             "thermal_share": round(sum(1 for r in rows if r[2] & THERMAL_BITS) / len(rows), 2)}
            for index, rows in sorted(busy.items())]


class ClockSampler:
    """Context manager: nvidia-smi in the background for the duration; `.summary` afterwards
    (empty without nvidia-smi or busy samples)."""

    def __init__(self, interval_ms: int = 100) -> None:
        self.interval_ms = interval_ms
        self.summary: list[dict[str, Any]] = []
        self._lines: list[str] = []
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> ClockSampler:
        smi = tool_path("nvidia-smi")
        if smi is None:
            return self
        try:
            self._proc = subprocess.Popen(
                [smi, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                 "-lms", str(self.interval_ms)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return self
        stdout = self._proc.stdout
        assert stdout is not None
        self._reader = threading.Thread(target=lambda: self._lines.extend(stdout), daemon=True)
        self._reader.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)
        self.summary = summarize(self._lines)


def _with_clocks(line: str, summary: list[dict[str, Any]]) -> str:
    """`line` with "gpu_clocks" added if it is a JSON object (and there is a summary)."""
    text = line.rstrip("\n")
    if not summary or not text.startswith("{"):
        return text
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return text
    if not isinstance(record, dict):
        return text
    return json.dumps({**record, "gpu_clocks": summary})


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2 or argv[0] != "--":
        print("error: usage: gpu_clocks.py -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    with ClockSampler() as sampler:
        try:
            done = subprocess.run(list(argv[1:]), stdout=subprocess.PIPE, text=True)
        except OSError as err:
            print(f"error: cannot run {argv[1]!r}: {err.strerror}", file=sys.stderr)
            return 2
    for line in done.stdout.splitlines():
        print(_with_clocks(line, sampler.summary), flush=True)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
