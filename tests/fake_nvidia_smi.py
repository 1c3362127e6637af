"""An nvidia-smi stand-in for the clock sampler (bench/gpu_clocks.py), installed through
GANTRY_NVIDIA_SMI as a real site would point at its own binary: it records its arguments in
argv.json next to itself, then prints two busy rows of the sampler's query every 10 ms until it
is terminated (rows in the format of the H200 recordings in bench/results/clocks-*.csv)."""

from __future__ import annotations

import sys
from pathlib import Path

BUSY_ROWS = ["0, 100, 1700, 650.5, 0x0000000000000004", "0, 95, 1800, 600.0, 0x0000000000000000"]
"""GPU 0 busy twice: SM clocks 1,700 and 1,800 MHz, the power cap active in the first."""


def write_fake_nvidia_smi(directory: Path) -> Path:
    """The stand-in's path (an executable script in `directory`)."""
    script = directory / "nvidia-smi"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys, time\n"
        f"open({str(directory / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        "while True:\n"
        f"    for row in {BUSY_ROWS!r}:\n"
        "        print(row, flush=True)\n"
        "    time.sleep(0.01)\n")
    script.chmod(0o755)
    return script
