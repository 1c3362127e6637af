"""The pipeline schedules by name, as a job spec spells them (``parallelism.schedule``); their
own module, which `gantry schedules`' parser reads at start-up without the job schema."""

from __future__ import annotations

from typing import Literal

Schedule = Literal["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-interleaved"]
