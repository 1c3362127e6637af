"""Every site check in display order: read the live cluster once, then compare the site config
with it (the build check needs no cluster)."""

from __future__ import annotations

from launcher.preflight.result import CheckResult
from launcher.site_check.live_facts import probe_live_facts
from launcher.site_check.node_checks import node_checks
from launcher.site_check.setup_checks import check_build, check_plugins, plugin_plan
from launcher.site_check.topology_checks import topology_checks
from launcher.site_config import LoadedSite


def check_site(site: LoadedSite) -> list[CheckResult]:
    """The site's checks; when Slurm does not answer, that failure and the build check. A
    site field the plugin suite cannot use raises UserInputError before Slurm is asked."""
    plan = plugin_plan(site)
    facts, why = probe_live_facts(site)
    if facts is None:
        hint = "`gantry cluster up --site ...`" if site.config.slurm.embedded else \
            "point SLURM_CONF at the site's slurm.conf, or check slurmctld"
        return [CheckResult("slurm", "FAIL", why, "the site's Slurm answering scontrol",
                            action=hint), check_build(site)]
    cluster = facts.config.get("ClusterName", "?")
    checks = [CheckResult("slurm", "PASS", f"Slurm {facts.version or '?'}, cluster {cluster}, "
                          f"controller {facts.config.get('SlurmctldHost[0]', '?')}")]
    checks += node_checks(site, facts)
    checks += topology_checks(site, facts)
    checks += [check_plugins(site, facts, plan), check_build(site)]
    return checks
