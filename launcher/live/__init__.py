"""The live view of `gantry submit --follow`: what the job is doing, read from its job
directory while it runs, and the summary at the end.

``watcher`` tails the job directory (log, attempts, preflight verdicts, chosen nodes,
metrics) and turns it into events (the script's log lines' phase times come from
launcher/report/log_markers.py); ``preflight_rows`` joins verdicts, placement and node
states into the preflight table; ``placement_view`` draws the placement tree with stage
labels; ``summary`` computes and renders the end-of-job summary; ``follow`` runs the loop
(rich on a terminal, plain lines when piped).
"""
