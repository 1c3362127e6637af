"""gantry's Slurm plugin suite: the SPANK plugin build, plugstack.conf, the site env files,
the Prolog/Epilog/HealthCheckProgram wiring and `gantry site install-plugins`."""
