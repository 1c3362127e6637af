"""The run monitor: node health sampled while the job trains (docs/monitor.md)."""
