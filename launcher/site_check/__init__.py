"""`gantry site check`: compare a site config with the live Slurm it describes (collect the
cluster's facts once, then compare them: partition, nodes, GPUs, topology, plugins, build)."""
