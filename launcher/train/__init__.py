"""`gantry train`: one process per rank running the native pipeline executor in-process."""
