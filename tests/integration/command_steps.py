"""A command job's program for the integration tests: counts steps, keeps its own checkpoint,
and holds mid-run in a fresh start until something stops it.

Every rank (RANK from `gantry torch-env` or torchrun) appends JSON lines to
``DIR/rank<R>.jsonl``: ``start`` (the step it resumes from, its node and attempt), each
``step``, ``hold`` (a run that started from step 0 waits there, after step HOLD, until a
signal ends it), ``term`` (it got SIGTERM: it exits 143) and ``end``. Its checkpoint is
``DIR/rank<R>.step`` (the last step done, written to a temp file and renamed), so a
relaunched rank goes on from there and does not hold again.

    python command_steps.py --dir DIR --steps N --hold-after HOLD
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--hold-after", type=int, required=True)
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    where = {"rank": rank, "node": os.environ.get("SLURMD_NODENAME", ""),
             "attempt": Path(os.environ.get("GANTRY_ATTEMPT_DIR", "")).name}
    log_path = args.dir / f"rank{rank}.jsonl"
    checkpoint = args.dir / f"rank{rank}.step"

    def log(event: str, step: int) -> None:
        line = json.dumps({**where, "event": event, "step": step, "time": time.time()})
        with open(log_path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")

    done = int(checkpoint.read_text()) if checkpoint.is_file() else 0

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        log("term", done)
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_term)
    start = done
    log("start", start)
    for step in range(start + 1, args.steps + 1):
        if start == 0 and step == args.hold_after + 1:
            log("hold", done)
            while True:
                signal.pause()
        staged = checkpoint.with_suffix(".tmp")
        staged.write_text(str(step))
        staged.replace(checkpoint)
        done = step
        log("step", step)
    log("end", done)
    return 0


if __name__ == "__main__":
    sys.exit(main())
