"""Site checks on what gantry installs for a site: the plugin suite (files on disk, and the
slurm.conf lines that load it in Slurm's running configuration) and the trainer build."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from launcher.build import built_library
from launcher.errors import GantryError, UserInputError
from launcher.plugins.install import (
    InstallPlan,
    check_suite_fields,
    default_prefix,
    plan_install,
)
from launcher.preflight.result import CheckResult
from launcher.site_check.live_facts import LiveFacts
from launcher.site_config import LoadedSite


def setting_in_effect(key: str, wanted: str, running: str) -> bool:
    """A slurm.conf line of the suite in effect, given `scontrol show config`'s value:
    "300 sec" for 300; Prolog=/Epilog= may list several scripts (comma-separated, or a
    glob such as /etc/slurm/prolog.d/*) of which gantry's is one; a site's own plugstack.conf
    may include gantry's."""
    value = running.removesuffix(" sec").strip()
    if value.lower() == wanted.strip().lower():
        return True
    if key in ("Prolog", "Epilog"):
        return any(_glob_matches(wanted, entry.strip()) for entry in value.split(","))
    if key == "PlugStackConfig":
        return _includes(Path(value), Path(wanted))
    return False


def _glob_matches(path: str, pattern: str) -> bool:
    """``path`` is ``pattern`` or one of the files it globs, as glob(3) matches: a wildcard
    never crosses a "/" and an absolute pattern matches the whole path."""
    if path == pattern:
        return True
    if not pattern.startswith("/") or not path.startswith("/"):
        return False
    return PurePosixPath(path).match(pattern)


def _includes(plugstack: Path, gantry_conf: Path) -> bool:
    """True when the site's plugstack.conf has an `include` line naming gantry's (or a glob
    matching it)."""
    try:
        lines = plugstack.read_text(errors="replace").splitlines()
    except OSError:
        return False
    for line in lines:
        words = line.split("#", 1)[0].split()
        if len(words) == 2 and words[0] == "include" and \
                _glob_matches(str(gantry_conf), words[1]):
            return True
    return False


def plugin_plan(site: LoadedSite) -> InstallPlan | str | None:
    """The suite's install plan when plugins are enabled and a prefix is known (set, or the
    embedded default), else None; why it cannot be planned on this host (the prefix a file,
    the site file's path unusable in slurm.conf) as a string, for a failed check. A site field
    the suite cannot use (a prefix with blanks, the name, mpi/nccl env) is bad input: it raises
    UserInputError, before anything is asked of Slurm."""
    prefix = default_prefix(site)
    if not site.config.plugins.enabled or prefix is None:
        return None
    check_suite_fields(site, prefix)
    try:
        return plan_install(site)
    except UserInputError as err:
        return str(err)


def check_plugins(site: LoadedSite, facts: LiveFacts,
                  plan: InstallPlan | str | None) -> CheckResult:
    """With plugins.enabled: the suite's files are installed and Slurm runs with its lines
    (``plan`` from :func:`plugin_plan`)."""
    if not site.config.plugins.enabled:
        return CheckResult("plugins", "SKIP", "plugins.enabled is false")
    if plan is None:
        return CheckResult("plugins", "FAIL", "plugins.prefix is not set and the site is not "
                           "embedded", "an install location for the suite",
                           action="set plugins.prefix to where `gantry site install-plugins` "
                           "put the suite")
    if isinstance(plan, str):
        return CheckResult("plugins", "FAIL", plan, "an install location for the suite",
                           action="fix the path named")
    expected = f"the suite installed under {plan.layout.prefix} and loaded by slurm.conf"
    paths = [f.path for f in plan.files]
    if plan.choice.spank:
        paths.append(plan.layout.spank_module)
    absent = [str(p) for p in paths if not p.exists()]
    differing = []
    for line in plan.slurm_conf_lines:
        key, _, wanted = line.partition("=")
        running = facts.config.get(key)
        if running is None or not setting_in_effect(key, wanted, running):
            differing.append(f"{key}={running if running is not None else '(absent)'}")
    problems = []
    if absent:
        problems.append(f"missing {len(absent)} file(s), e.g. {absent[0]}")
    if differing:
        problems.append("Slurm runs " + ", ".join(differing))
    if problems:
        return CheckResult("plugins", "FAIL", "; ".join(problems), expected,
                           action=f"run `gantry site install-plugins --site {site.path}`, add "
                           "the lines it prints to slurm.conf, then `scontrol reconfigure`")
    return CheckResult("plugins", "PASS", f"{len(paths)} files installed, "
                       f"{len(plan.slurm_conf_lines)} slurm.conf settings in effect", expected)


def check_build(site: LoadedSite) -> CheckResult:
    """The native trainer is built for this site and source tree (`gantry build`)."""
    expected = f"`gantry build` done for site {site.config.name!r} " \
               f"({site.config.build.backend} backend)"
    try:
        library = built_library(site)
    except GantryError:
        return CheckResult("build", "WARN", "no build for this site and source tree", expected,
                           action=f"run `gantry build --site {site.path}` (gantry submit builds it "
                           "otherwise, before the job starts)")
    return CheckResult("build", "PASS", f"built: {library}", expected)
