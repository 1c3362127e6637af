"""The embedded Slurm cluster: a real munged, slurmctld and one slurmd per emulated node on
this host, configured from a site config and kept entirely under one run directory.

Modules: ``versions`` (which Slurm is installed, what it supports), ``layout`` (the run
directory), ``render`` (slurm.conf / topology.conf as pure functions), ``tools`` (binary
paths), ``processes`` (pid records, identity checks, start/stop), ``ports``, ``munge``,
``lifecycle`` (up/down), ``status`` (nodes, states, switch tree) and ``jobs`` (waiting for jobs).
"""
