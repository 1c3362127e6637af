"""Site checks on what gantry installs for a site: the plugin suite (files on disk, and the
slurm.conf lines that load it in Slurm's running configuration) and the trainer build."""

from __future__ import annotations

from launcher.build import built_library
from launcher.errors import GantryError, UserInputError
from launcher.plugins.install import plan_install
from launcher.site_check.live_facts import LiveFacts
from launcher.site_check.results import SiteCheck
from launcher.site_config import LoadedSite


def _same_setting(wanted: str, running: str) -> bool:
    """slurm.conf value vs `scontrol show config`'s ("300" vs "300 sec", case of ANY)."""
    return running.removesuffix(" sec").strip().lower() == wanted.strip().lower()


def check_plugins(site: LoadedSite, facts: LiveFacts) -> SiteCheck:
    """With plugins.enabled: the suite's files are installed and Slurm runs with its lines."""
    if not site.config.plugins.enabled:
        return SiteCheck("plugins", "skip", "plugins.enabled is false")
    try:
        plan = plan_install(site)
    except UserInputError as err:
        return SiteCheck("plugins", "fail", str(err), "an install location for the suite",
                         "set plugins.prefix")
    expected = f"the suite installed under {plan.layout.prefix} and loaded by slurm.conf"
    paths = [f.path for f in plan.files]
    if plan.choice.spank:
        paths.append(plan.layout.spank_module)
    absent = [str(p) for p in paths if not p.exists()]
    differing = []
    for line in plan.slurm_conf_lines:
        key, _, wanted = line.partition("=")
        running = facts.config.get(key)
        if running is None or not _same_setting(wanted, running):
            differing.append(f"{key}={running if running is not None else '(absent)'}")
    problems = []
    if absent:
        problems.append(f"missing {len(absent)} file(s), e.g. {absent[0]}")
    if differing:
        problems.append("Slurm runs " + ", ".join(differing))
    if problems:
        return SiteCheck("plugins", "fail", "; ".join(problems), expected,
                         f"run `gantry site install-plugins --site {site.path}`, add the lines "
                         "it prints to slurm.conf, then `scontrol reconfigure`")
    return SiteCheck("plugins", "ok", f"{len(paths)} files installed, "
                     f"{len(plan.slurm_conf_lines)} slurm.conf settings in effect", expected)


def check_build(site: LoadedSite) -> SiteCheck:
    """The native trainer is built for this site and source tree (`gantry build`)."""
    expected = f"`gantry build` done for site {site.config.name!r} " \
               f"({site.config.build.backend} backend)"
    try:
        library = built_library(site)
    except GantryError:
        return SiteCheck("build", "warn", "no build for this site and source tree", expected,
                         f"run `gantry build --site {site.path}` (gantry submit builds it "
                         "otherwise, before the job starts)")
    return SiteCheck("build", "ok", f"built: {library}", expected)
