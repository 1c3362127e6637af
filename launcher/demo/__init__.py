"""`gantry demo`: gantry's whole job on the embedded cluster, unattended.

``faults`` writes the fault drill (a fake sysfs tree: every node's InfiniBand port up, one
node's down), ``corpus`` gathers the training text shipped in the repository, ``job`` writes
the demo's job spec, and ``run`` drives the flow (cluster, build, data, submit + live view,
report).
"""
