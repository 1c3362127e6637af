"""gantry: a Slurm-integrated launcher for pipeline-parallel GPU training."""

__version__ = "0.1.0"
