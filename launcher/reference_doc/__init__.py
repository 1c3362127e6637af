"""The generated reference pages of docs/reference/: the site config, the job spec and the
environment variables, each rendered from the code that defines it. ``python -m
launcher.reference_doc --write`` regenerates all of them; without ``--write`` it names the
stale ones and exits 1. Unit tests compare every page with its generator's output."""
