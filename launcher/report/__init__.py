"""`gantry report`: what a training run did, as PNG plots, a self-contained HTML page and the
Perfetto trace.

``sources`` finds a job's run directories, ``run_data`` reads ``metrics.jsonl`` and
``trace.json``, ``timeline`` turns trace spans into per-rank phases and the measured bubble,
``theory`` asks the schedules package for the schedule's own bubble, ``plots`` draws
(matplotlib, Agg), ``html`` writes the page and ``build`` ties them together.
"""
