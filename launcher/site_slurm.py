"""How gantry reaches a site's Slurm: the environment of its commands (an embedded site's own
slurm.conf), whether its config exists, the command runner and the client. Light on
purpose: `gantry status` and `gantry cancel` need only this, not the placement."""

from __future__ import annotations

import os
from pathlib import Path

from launcher.cluster.layout import RunLayout
from launcher.site_config import LoadedSite
from launcher.slurm import CommandRunner, SlurmClient, make_client


def site_slurm_env(site: LoadedSite) -> dict[str, str] | None:
    """Environment for Slurm commands of ``site``: for an embedded site whose cluster has a
    slurm.conf and no SLURM_CONF is set, point SLURM_CONF at it; else None (inherit)."""
    if not site.config.slurm.embedded or os.environ.get("SLURM_CONF"):
        return None
    layout = RunLayout(site.run_dir())
    if not layout.slurm_conf.is_file() or not controller_running(layout):
        return None
    return {**os.environ, "SLURM_CONF": str(layout.slurm_conf)}


def controller_running(layout: RunLayout) -> bool:
    """Whether the embedded cluster's slurmctld runs (its pid record names a live process):
    a cluster stopped by `gantry cluster down` leaves its slurm.conf behind, and asking it
    would only fail."""
    from launcher.cluster.processes import is_ours, read_records

    return any(r.daemon == "slurmctld" and is_ours(r) for r in read_records(layout))


def slurm_access(site: LoadedSite) -> dict[str, str | None]:
    """What request.json keeps of how to reach ``site``'s Slurm (its ``slurm.client`` and an
    embedded site's slurm.conf), so that `gantry status` and `gantry cancel` need not load
    the site config again (launcher.slurm.recorded_client)."""
    env = site_slurm_env(site)
    return {"client": site.config.slurm.client,
            "slurm_conf": env["SLURM_CONF"] if env is not None else None}


#: Where Slurm's tools look for their config when SLURM_CONF is unset (Debian's build).
DEFAULT_SLURM_CONF = Path("/etc/slurm/slurm.conf")


def slurm_conf_problem(site: LoadedSite) -> str | None:
    """Why the site's Slurm cannot be asked (its config file is missing), else None.

    Checked first because Slurm's tools retry a missing config for a minute.
    """
    env = site_slurm_env(site) or os.environ
    conf = Path(env["SLURM_CONF"]) if env.get("SLURM_CONF") else DEFAULT_SLURM_CONF
    if conf.is_file():
        return None
    if site.config.slurm.embedded and not env.get("SLURM_CONF"):
        conf = RunLayout(site.run_dir()).slurm_conf  # where `gantry cluster up` puts it
        if conf.is_file():
            return (f"the embedded cluster of {conf.parent.parent} is not running "
                    "(`gantry cluster up`)")
    hint = " (is the embedded cluster up? `gantry cluster up`)" if site.config.slurm.embedded \
        else ""
    return f"no Slurm config at {conf}{hint}"


def site_client_runner(site: LoadedSite, quick: bool = False,
                       timeout_s: float = 15.0) -> CommandRunner:
    """The command runner for ``site``'s Slurm (``quick``: no retries and ``timeout_s`` per
    command: for probing)."""
    env = site_slurm_env(site)
    if quick:
        return CommandRunner(env=env, timeout_s=timeout_s, retries=0)
    return CommandRunner(env=env)


def site_client(site: LoadedSite, quick: bool = False) -> SlurmClient:
    """The Slurm client of ``site`` (``quick``: no retries, short timeout: for probing)."""
    return make_client(site.config.slurm.client, runner=site_client_runner(site, quick))
