"""Fuzzes gantry's input files and flags through the real CLI, in-process: mutated job YAML,
site configs, topology files, hostlists and flags exit 0, or 2 with one `error: ` line on stderr;
never a traceback, another exit status, or a half-written output."""

from __future__ import annotations

import contextlib
import copy
import io
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from launcher.cli import main

REPO = Path(__file__).resolve().parent.parent.parent
EXAMPLE_JOB = REPO / "examples" / "gpt2-tiny-pp2-dp2.yaml"
LOCAL_SITE = REPO / "site_configs" / "local.yaml"

FUZZ = settings(
    # GANTRY_FUZZ_EXAMPLES=2000 for a deeper hunt; the default keeps the file ~30 s on 2 cores.
    max_examples=int(os.environ.get("GANTRY_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ---------------------------------------------------------------------------------------------
# Valid inputs the fuzzers start from (every optional section present, so that mutations reach
# every depth of the typed configs).

BASE_JOB: dict[str, Any] = {
    **yaml.safe_load(EXAMPLE_JOB.read_text()),
    "policy": {"preflight_level": "quick", "requeue": True, "max_restarts": 2,
               "signal_lead_s": 60, "hang_timeout_s": 120.5},
    "env": {"FOO": "bar", "EMPTY": ""},
    "command": ["python3", "-c", "print(1)"],
}
BASE_JOB["parallelism"] = {**BASE_JOB["parallelism"], "stage_layers": [2, 2]}
BASE_JOB["resources"] = {**BASE_JOB["resources"], "dependencies": ["afterok:1"],
                         "cpus_per_task": 1, "partition": "debug"}
BASE_JOB["train"] = {**BASE_JOB["train"], "seed": 7, "min_lr": 0.0}

BASE_SITE: dict[str, Any] = {
    **yaml.safe_load(LOCAL_SITE.read_text()),
    "nccl": {"env": {"NCCL_NVLS_ENABLE": "0"}},
    "plugins": {"enabled": False, "spank": True, "preflight_timeout_s": 60,
                "preflight_env": {"GANTRY_X": "1"}},
}
BASE_SITE["preflight"] = {**BASE_SITE["preflight"], "thresholds": {}, "disk_paths": ["/tmp"],
                          "xid_actions": {48: "reset", 79: "drain"}, "max_drain_fraction": 0.25}
BASE_SITE["slurm"] = {**BASE_SITE["slurm"], "sbatch_options": ["--exclusive"]}

BASE_TOPOLOGY_YAML: list[Any] = [
    {"topology": "fat", "cluster_default": True, "tree": {"switches": [
        {"switch": "leaf1", "nodes": "n[1-4]"},
        {"switch": "leaf2", "nodes": "n[5-8]"},
        {"switch": "core", "children": "leaf[1-2]"},
    ]}},
    {"topology": "blocks", "block": {"block_sizes": [2, 4], "blocks": [
        {"block": "b1", "nodes": "n[1-4]"},
        {"block": "b2", "nodes": "n[5-8]"},
    ]}},
    {"topology": "none", "flat": True},
]

BASE_TOPOLOGY_CONF = """\
# two leaves under one spine
SwitchName=leaf1 Nodes=n[1-4] LinkSpeed=100
SwitchName=leaf2 Nodes="n[5-8]"
SwitchName=spine Switches=leaf[1-2] \\
  LinkSpeed=200
"""

BASE_BLOCK_CONF = """\
BlockSizes=2,4
BlockName=b1 Nodes=n[1-4]
BlockName=b2 Nodes=n[5-8]
"""

# ---------------------------------------------------------------------------------------------
# The CLI, in-process, and the property.


@pytest.fixture(scope="module", autouse=True)
def _isolated_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No Slurm is asked (SLURM_CONF names a missing file), nothing lands outside a temp dir."""
    root = tmp_path_factory.mktemp("fuzz-env")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(root / "no-such-slurm.conf"))
        mp.setenv("GANTRY_JOBS_DIR", str(root / "jobs"))
        mp.setenv("GANTRY_BUILD_CACHE", str(root / "build-cache"))
        mp.setenv("GANTRY_RUN_DIR", str(root / "run"))
        mp.setenv("GANTRY_STATE_DIR", str(root / "state"))
        mp.chdir(root)
        yield


@dataclass(frozen=True)
class Outcome:
    argv: tuple[str, ...]
    code: int
    stdout: str
    stderr: str


def run_cli(argv: Sequence[str]) -> Outcome:
    """`gantry ARGV` in this process: exit status, stdout, stderr. Other exceptions propagate
    (hypothesis then shows the traceback and the shrunk input)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return Outcome(tuple(argv), code, out.getvalue(), err.getvalue())


PLACEMENT_INFEASIBLE = re.compile(
    r"error: (the job needs \d+ nodes|no switch has|only \d+ free healthy nodes|no \S+ block "
    r"group|the free healthy nodes cannot hold|\S+: a block topology needs Slurm)"
)
"""`gantry plan`'s exit-1 failures: valid input whose nodes the topology / free nodes cannot
hold (tests/unit/test_topology_plan_cli.py::test_impossible_request_is_one_line_exit_1)."""


def check(outcome: Outcome, infeasible_ok: bool = False) -> None:
    """The contract: exit 0, or exit 2 with exactly one `error: ` line; no traceback ever."""
    context = f"argv={outcome.argv!r}\nexit {outcome.code}\nstderr:\n{outcome.stderr}"
    assert "Traceback" not in outcome.stdout + outcome.stderr, context
    lines = outcome.stderr.splitlines()
    if infeasible_ok and outcome.code == 1:
        assert len(lines) == 1 and PLACEMENT_INFEASIBLE.match(lines[0]), context
        return
    assert outcome.code in (0, 2), context
    if outcome.code == 2:
        assert len(lines) == 1 and lines[0].startswith("error: "), context
        assert outcome.stdout == "", context


def nothing_written(directory: Path) -> bool:
    return not directory.exists() or not any(directory.iterdir())


# ---------------------------------------------------------------------------------------------
# Mutations.

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=12),
    st.sampled_from([-(2**63), -1, 0, 2**31, 2**63, 10**30, 10**400]),
    st.integers(),
    st.floats(),
    st.sampled_from(["", " ", "é", "名前", "🚀", "a\nb", "\t", "x" * 300, "0", "-1", "~", "yes",
                     "n[1-3", "n[1-8]", "n[0-99999999]", "leaf[1-2]", "n1,n1", "$(id)",
                     "00:10:00", "1-00:00:00", "gpipe", "tree", "block", "flat", "cuda", "\x00"]),
    st.text(max_size=12),
)
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3),
    st.dictionaries(st.text(max_size=6), SCALARS, max_size=3),
    st.builds(dict),
    st.builds(list),
)
KEYS = st.one_of(st.sampled_from(["bogus", "Nodes", "name", "", "é"]), st.text(max_size=8),
                 st.integers(-2, 2))

TreePath = tuple[Any, ...]


def node_paths(tree: Any, prefix: TreePath = ()) -> list[TreePath]:
    """The path of every node of a YAML tree (mapping values and list items), root first."""
    paths = [prefix]
    if isinstance(tree, dict):
        for key, value in tree.items():
            paths += node_paths(value, (*prefix, key))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            paths += node_paths(value, (*prefix, index))
    return paths


def node_at(tree: Any, path: TreePath) -> Any:
    for part in path:
        tree = tree[part]
    return tree


@st.composite
def mutated(draw: st.DrawFn, base: Any) -> Any:
    """``base`` with 1-3 mutations: a key or item deleted, a value replaced by one of another
    type (or a bad value of its own), an unknown key added -- at any depth."""
    tree = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(node_paths(tree)))
        target = node_at(tree, path)
        op = draw(st.sampled_from(["replace", "delete", "add_key"]))
        if op == "delete" and path:
            del node_at(tree, path[:-1])[path[-1]]
        elif op == "add_key" and isinstance(target, dict):
            target[draw(KEYS)] = draw(VALUES)
        else:
            value = draw(VALUES)
            if path:
                node_at(tree, path[:-1])[path[-1]] = value
            else:
                tree = value
    return tree


NASTY_YAML = [
    "!!int abc", "!!float x", "!!timestamp 2020-13-45", "!!int 0x1z", "!!binary ====",
    "!!python/object/apply:os.system [ls]", "!foo bar", "&a [*a]", "&m {k: *m}", "*undefined",
    "[" * 400 + "]" * 400, "{a: 1, a: 2}", "!!set {a, b}", "!!omap [a: 1]", "? [1]\n: 2",
    "'unterminated", '"\\xZZ"', "%YAML 1.1", "---\n---", "@reserved", "`tick", "0x1F", "1e309",
    "-.inf", ".NaN", "2001-12-14t21:59:43.10-05:00", "|\n  two\n  lines", "{", "]", ":", "- -",
    "\t", "\ufeff", "\x85", "\x7f",
]


@st.composite
def garbled(draw: st.DrawFn, text: str) -> str:
    """``text`` truncated, with a value replaced by nasty YAML, or with junk inserted."""
    op = draw(st.sampled_from(["truncate", "nasty_value", "insert", "replace_all"]))
    if op == "truncate":
        return text[: draw(st.integers(0, max(0, len(text) - 1)))]
    if op == "replace_all":
        return draw(st.one_of(st.text(max_size=40), st.sampled_from(NASTY_YAML)))
    if op == "nasty_value":
        lines = text.splitlines()
        candidates = [i for i, line in enumerate(lines) if ": " in line]
        if candidates:
            i = draw(st.sampled_from(candidates))
            head = lines[i].split(": ", 1)[0]
            lines[i] = f"{head}: {draw(st.sampled_from(NASTY_YAML))}"
            return "\n".join(lines) + "\n"
    at = draw(st.integers(0, len(text)))
    junk = draw(st.one_of(st.text(max_size=6), st.sampled_from(NASTY_YAML)))
    return text[:at] + junk + text[at:]


def dump(tree: Any) -> str:
    return yaml.safe_dump(tree, allow_unicode=True, sort_keys=False)


def yaml_input(base: Any) -> st.SearchStrategy[str]:
    """Text of a mutated ``base`` (mostly), or of a garbled dump of it."""
    return st.one_of(mutated(base).map(dump), mutated(base).map(dump),
                     garbled(dump(base)))


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="gantry-fuzz-") as name:
        yield Path(name)


# ---------------------------------------------------------------------------------------------
# The bases themselves are valid (else the fuzz below would test nothing).


def test_bases_are_valid() -> None:
    with workdir() as tmp:
        job, site = tmp / "job.yaml", tmp / "site.yaml"
        job.write_text(dump(BASE_JOB))
        site.write_text(dump(BASE_SITE))
        topo_yaml, topo_conf, block_conf = tmp / "t.yaml", tmp / "t.conf", tmp / "b.conf"
        topo_yaml.write_text(dump(BASE_TOPOLOGY_YAML))
        topo_conf.write_text(BASE_TOPOLOGY_CONF)
        block_conf.write_text(BASE_BLOCK_CONF)
        runs = [
            run_cli(["render", str(job), "--site", str(site)]),
            run_cli(["render", str(EXAMPLE_JOB), "--site", str(LOCAL_SITE)]),
            run_cli(["plan", str(job), "--site", str(site), "--offline",
                     "--slurm-version", "24.11"]),
            run_cli(["preflight-scripts", str(tmp / "scripts"), "--site", str(site)]),
        ]
        for topo in (topo_yaml, topo_conf, block_conf):
            site.write_text(dump({**BASE_SITE, "topology": {"file": topo.name}}))
            runs.append(run_cli(["plan", "--site", str(site), "--nodes", "2", "--offline",
                                 "--slurm-version", "24.11"]))
        for outcome in runs:
            assert outcome.code == 0, outcome


# ---------------------------------------------------------------------------------------------
# Job YAML -> `gantry render` (with --site, or with the job's own `site:`), `gantry plan`.


@FUZZ
@given(text=yaml_input({**BASE_JOB, "site": str(LOCAL_SITE)}),
       command=st.sampled_from(["render", "render-own-site", "plan"]))
@example(text="name: a\nmodel: {n_layer: !!int abc}\n", command="render")
@example(text="name: a\nresources: " + "[" * 2000 + "]" * 2000 + "\n", command="render")
@example(text="name: a\npolicy: {hang_timeout_s: " + "9" * 400 + "}\n", command="render")
@example(text='name: a\nenv: {"A\\nB": x}\n', command="render")
def test_job_yaml(text: str, command: str) -> None:
    with workdir() as tmp:
        job, out = tmp / "job.yaml", tmp / "out" / "job.sbatch"
        out.parent.mkdir()
        job.write_text(text, encoding="utf-8")
        if command == "plan":
            argv = ["plan", str(job), "--site", str(LOCAL_SITE), "--offline",
                    "--slurm-version", "22.05.8"]
        else:
            argv = ["render", str(job), "-o", str(out)]
            if command == "render":
                argv += ["--site", str(LOCAL_SITE)]
        outcome = run_cli(argv)
        check(outcome, infeasible_ok=command == "plan")
        if outcome.code != 0:
            assert not out.exists(), outcome


# ---------------------------------------------------------------------------------------------
# Site config YAML -> `gantry render`, `gantry plan`, `gantry preflight-scripts`.


@FUZZ
@given(text=yaml_input(BASE_SITE),
       command=st.sampled_from(["render", "plan", "preflight-scripts"]))
@example(text=LOCAL_SITE.read_text().replace("cpus: 2", "cpus: !!float x"), command="render")
@example(text=dump(BASE_SITE) + '"\\r": null\n', command="render")
@example(text="name: s\ndescription: !!timestamp 2020-13-45\n  tree)\nnodes: {names: n1}\n",
         command="plan")
def test_site_yaml(text: str, command: str) -> None:
    with workdir() as tmp:
        site, out = tmp / "site.yaml", tmp / "out"
        site.write_text(text, encoding="utf-8")
        if command == "render":
            argv = ["render", str(EXAMPLE_JOB), "--site", str(site), "-o", str(out / "x.sbatch")]
            out.mkdir()
        elif command == "plan":
            argv = ["plan", "--site", str(site), "--nodes", "2", "--pp", "2", "--offline",
                    "--slurm-version", "24.11"]
        else:
            argv = ["preflight-scripts", str(out), "--site", str(site)]
        outcome = run_cli(argv)
        check(outcome, infeasible_ok=command == "plan")
        if outcome.code != 0:
            assert nothing_written(out), outcome


# ---------------------------------------------------------------------------------------------
# Topology files named by the site (topology.yaml and topology.conf) -> `gantry plan`, `render`.


def site_with_topology(tmp: Path, topo_name: str, plugin: str) -> Path:
    site = tmp / "site.yaml"
    site.write_text(dump({**BASE_SITE, "topology": {"plugin": plugin, "file": topo_name}}))
    return site


def plan_argv(site: Path, nodes: int) -> list[str]:
    return ["plan", "--site", str(site), "--nodes", str(nodes), "--offline",
            "--slurm-version", "24.11", "--json"]


@FUZZ
@given(text=yaml_input(BASE_TOPOLOGY_YAML), plugin=st.sampled_from(["flat", "tree", "block"]),
       nodes=st.integers(1, 4), render=st.booleans())
@example(text="- topology: !!int abc\n  flat: true\n", plugin="flat", nodes=1, render=False)
@example(text="- topology: t\n  tree: " + "[" * 2000, plugin="flat", nodes=1, render=False)
@example(text="- topology: t\n  flat: !!bool x\n", plugin="flat", nodes=1, render=False)
def test_topology_yaml(text: str, plugin: str, nodes: int, render: bool) -> None:
    check_topology_file("topo.yaml", text, plugin, nodes, render)


def check_topology_file(name: str, text: str, plugin: str, nodes: int, render: bool) -> None:
    """A site naming topology file `name` (holding `text`): render the example job against
    it, or plan `nodes` nodes on it."""
    with workdir() as tmp:
        (tmp / name).write_text(text, encoding="utf-8")
        site = site_with_topology(tmp, name, plugin)
        if render:
            check(run_cli(["render", str(EXAMPLE_JOB), "--site", str(site)]))
        else:
            check(run_cli(plan_argv(site, nodes)), infeasible_ok=True)


@st.composite
def conf_text(draw: st.DrawFn) -> str:
    """A tree or block topology.conf with 1-3 line/token edits, or garbled."""
    lines = draw(st.sampled_from([BASE_TOPOLOGY_CONF, BASE_BLOCK_CONF])).splitlines()
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["delete", "duplicate", "token", "insert", "garble"]))
        i = draw(st.integers(0, len(lines) - 1)) if lines else 0
        if op == "delete" and lines:
            del lines[i]
        elif op == "duplicate" and lines:
            lines.insert(i, lines[i])
        elif op == "token" and lines:
            tokens = lines[i].split(" ")
            j = draw(st.integers(0, len(tokens) - 1))
            key = tokens[j].partition("=")[0]
            value = draw(st.one_of(st.text(max_size=8), st.sampled_from(
                ["", "n[1-3", "n9", "n[0-99999999]", "\u00b2", "٣", "-1", "0", "1,,2", '"',
                 "a b", "x\\", "\\#", "#", "leaf1", "core", "n[1-8]"])))
            tokens[j] = draw(st.sampled_from([f"{key}={value}", value, f"{value}={value}"]))
            lines[i] = " ".join(tokens)
        elif op == "insert":
            lines.insert(i, draw(st.one_of(st.text(max_size=20), st.sampled_from(
                ["Include x", "SwitchName=", "BlockSizes=\u00b2", "BlockSizes=1,١", "Nodes=n1",
                 "SwitchName=s Bogus=1", "BlockName=b9 Nodes=n1", "\\", "SwitchName=leaf1"]))))
        else:
            text = "\n".join(lines)
            lines = draw(garbled(text)).splitlines()
    return "\n".join(lines) + "\n"


@FUZZ
@given(text=conf_text(), plugin=st.sampled_from(["flat", "tree", "block"]),
       nodes=st.integers(1, 4), render=st.booleans())
@example(text="BlockSizes=\u00b2\nBlockName=b1 Nodes=n[1-8]\n", plugin="block", nodes=1,
         render=False)
def test_topology_conf(text: str, plugin: str, nodes: int, render: bool) -> None:
    check_topology_file("topology.conf", text, plugin, nodes, render)


# ---------------------------------------------------------------------------------------------
# Hostlists and numeric / string flags.

HOSTLISTS = st.one_of(
    st.sampled_from(["n1", "n[1-8]", "n[1-3", "n[3-1]", "n[1-2,,3]", "", ",", "n[01-8]",
                     "n[1-99999999]", "n[1-8],zz", "leaf1", "n[1-2]x[1-2]", "[1-2]", "n[-1]",
                     "n[a-b]", "n[1-8]]", "n1,n1", "N1", "n\u00b2", "n[\u00b2-3]", " n1 "]),
    st.text(alphabet="n0123456789[]-,x ", max_size=12),
    st.text(max_size=8),
)
ARG_TEXT = st.text(max_size=10).filter(lambda s: "\x00" not in s)  # argv cannot hold NUL
INTS = st.one_of(st.integers(-3, 10), st.sampled_from([-(2**63), 2**31, 2**63, 10**20]))

FlagValues = tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]


@st.composite
def flag_args(draw: st.DrawFn, flags: dict[str, FlagValues], most: int) -> list[str]:
    """Up to ``most`` of ``flags`` as ``--flag=value`` (so that a value starting with "-" stays
    a value); each value plausible (2 in 3) or wild: the command gets past the first flag."""
    argv = []
    for flag in draw(st.lists(st.sampled_from(sorted(flags)), max_size=most, unique=True)):
        plausible, wild = flags[flag]
        argv.append(f"{flag}={draw(st.one_of(plausible, plausible, wild))}")
    return argv


PLAN_FLAGS: dict[str, FlagValues] = {
    "--nodes": (st.integers(1, 6), INTS),
    "--spares": (st.integers(0, 2), INTS),
    "--pp": (st.sampled_from([1, 2, 4]), INTS),
    "--dp": (st.integers(1, 4), INTS),
    "--gpus-per-node": (st.integers(0, 2), INTS),
    "--free": (st.sampled_from(["n[1-8]", "n[1-4]", "n[3-8]", "n[1,3,5-8]"]), HOSTLISTS),
    "--unhealthy": (st.sampled_from(["n2", "n[7-8]", "n1,n5"]), HOSTLISTS),
    "--slurm-version": (st.sampled_from(["22.05.8", "23.11.1", "24.11"]),
                        st.sampled_from(["23", "x.y", "", "23.02.0-1", "1e9.1", "\u00b2.11",
                                         "\u0662\u0664.11"]) | ARG_TEXT),
}


@FUZZ
@given(flags=flag_args(PLAN_FLAGS, 5), job=st.booleans())
@example(flags=["--gpus-per-node=10000000000000000000"], job=False)
@example(flags=["--unhealthy=\x85"], job=False)
@example(flags=["--slurm-version="], job=False)
def test_plan_flags(flags: list[str], job: bool) -> None:
    # Defaults first (the last of a repeated flag wins): a job or --nodes, and a Slurm version
    # (else plan runs `sinfo -V`).
    base = [str(EXAMPLE_JOB)] if job else ["--nodes=2"]
    check(run_cli(["plan", *base, "--offline", "--slurm-version=24.11", *flags]),
          infeasible_ok=True)


NAMES = st.from_regex(r"[a-z][a-z0-9._-]{0,10}", fullmatch=True)
RENDER_FLAGS: dict[str, FlagValues] = {
    "--nodes": (st.sampled_from([2, 4]), INTS),
    "--spares": (st.integers(0, 4), INTS),
    "--gpus-per-node": (st.sampled_from([1, 2]), INTS),
    "--cpus-per-task": (st.integers(1, 2), INTS),
    "--time": (st.sampled_from(["5", "1-00:00", "00:10:00", "1-0"]),
               st.sampled_from(["99:99", "\u00b2", "\u0661", "-5", "1:2:3:4"]) | ARG_TEXT),
    "--name": (NAMES, ARG_TEXT),
    "--partition": (NAMES, ARG_TEXT),
    "--account": (NAMES, ARG_TEXT),
    "--qos": (NAMES, ARG_TEXT),
    "--container-image": (st.just("nvcr.io#nvidia/pytorch:24.01-py3"), ARG_TEXT),
    "--env": (st.sampled_from(["A=1", "B=x y", "C=", "D=$(id)"]), ARG_TEXT),
    "--dependency": (st.sampled_from(["afterok:1", "singleton", "afterany:1:2"]), ARG_TEXT),
    "--preflight": (st.sampled_from(["off", "quick", "standard", "deep"]), ARG_TEXT),
    "--jobs-dir": (st.just("jobs"), ARG_TEXT),
}


@FUZZ
@given(flags=flag_args(RENDER_FLAGS, 4), command=st.lists(ARG_TEXT, max_size=2))
def test_render_flags(flags: list[str], command: list[str]) -> None:
    argv = ["render", str(EXAMPLE_JOB), "--site", str(LOCAL_SITE), *flags]
    if command:
        argv += ["--", *command]
    check(run_cli(argv))


# ---------------------------------------------------------------------------------------------
# What the fuzz found, pinned down: exit 2 and the message that names the file / field / value.


@pytest.mark.parametrize(("job_text", "site_prefix", "message"), [
    ("name: a\nmodel: {n_layer: !!int abc}\n", None,
     "job.yaml:2: !!int 'abc' cannot be read (invalid literal for int() with base 10: 'abc')"),
    ("name: a\ntrain: {lr: .nan}\n", None, "train.lr: nan is not allowed (expected a finite"),
    ("name: a\npolicy: {hang_timeout_s: 1" + "0" * 400 + "}\n", None,
     "policy.hang_timeout_s: 1000"),
    ('name: a\nenv: {"A\\nB": x}\n', None, "env['A\\nB']: is not a valid environment variable"),
    ("name: a\nresources: {time_limit: '٠١:٠٠'}\n", None, "resources.time_limit: '٠١:٠٠' is not"),
    ("name: a\nresources: {nodes: 1, gpus_per_node: 3}\n", None,
     "resources.gpus_per_node: 3 is not allowed (site local has 2 CPUs per node)"),
    ("name: a\n", '"\\r": null\n', "site.yaml: ['\\r']: unknown key (allowed here: name,"),
    ("name: a\n", "description: !!timestamp 2020-13-45\n  x\n",
     "site.yaml:1: !!timestamp '2020-13-45 x' cannot be read (not a value of this tag)"),
])
def test_found_bad_files(job_text: str, site_prefix: str | None, message: str) -> None:
    with workdir() as tmp:
        job, site = tmp / "job.yaml", tmp / "site.yaml"
        job.write_text(job_text, encoding="utf-8")
        site_text = LOCAL_SITE.read_text()
        if site_prefix is not None:  # atop local.yaml, whose own description is commented out
            site_text = site_prefix + site_text.replace("description: ", "# ")
        site.write_text(site_text, encoding="utf-8")
        outcome = run_cli(["render", str(job), "--site", str(site)])
        check(outcome)
        assert outcome.code == 2 and message in outcome.stderr, outcome


@pytest.mark.parametrize(("argv", "message"), [
    (["--nodes=2", "--gpus-per-node=10000000000000000000"],
     "error: command line: --gpus-per-node: 10000000000000000000 is not allowed (site local "
     "has 2 CPUs per node)"),
    (["--nodes=1", "--unhealthy=\x85"], "error: --unhealthy: bad hostlist '\\x85' (expected host "
     "names without blanks or control characters)"),
    (["--nodes=1", "--slurm-version="],
     "error: --slurm-version: '' is not allowed (expected e.g. 22.05.8 or 24.11)"),
    (["--nodes=1", "--slurm-version=-1.2"],
     "error: --slurm-version: '-1.2' is not allowed (expected e.g. 22.05.8 or 24.11)"),
    (["--nodes=1", "--slurm-version=1e5.3"],
     "error: --slurm-version: '1e5.3' is not allowed (expected e.g. 22.05.8 or 24.11)"),
])
def test_found_bad_plan_flags(argv: list[str], message: str) -> None:
    outcome = run_cli(["plan", "--offline", "--slurm-version=24.11", *argv])
    check(outcome)
    assert outcome.code == 2 and outcome.stderr.startswith(message), outcome


@pytest.mark.parametrize(("name", "text", "message"), [
    ("topology.conf", "BlockSizes=\u00b2\nBlockName=b1 Nodes=n[1-8]\n",
     "topology.conf:1: BlockSizes value '\u00b2' is not allowed (expected positive integers "
     "of at most 18 digits)"),
    ("topo.yaml", "- topology: t\n  flat: !!bool x\n",
     "topo.yaml:2: flat 'x' is not allowed (not a value of this tag)"),
    ("topo.yaml", "- topology: t\n  tree: " + "[" * 5000, "topo.yaml: nested too deeply"),
])
def test_found_bad_topology_files(name: str, text: str, message: str) -> None:
    with workdir() as tmp:
        (tmp / name).write_text(text, encoding="utf-8")
        outcome = run_cli(plan_argv(site_with_topology(tmp, name, "flat"), 1))
        check(outcome)
        assert outcome.code == 2 and message in outcome.stderr, outcome


@pytest.mark.parametrize("which", ["job", "site", "topology"])
def test_file_that_is_not_utf8(which: str) -> None:
    with workdir() as tmp:
        bad = tmp / f"{which}.yaml"
        bad.write_bytes(b"name: \xff\xfe\n")
        job, site = EXAMPLE_JOB, LOCAL_SITE
        if which == "job":
            job = bad
        elif which == "site":
            site = bad
        else:
            site = site_with_topology(tmp, bad.name, "tree")
        outcome = run_cli(["render", str(job), "--site", str(site)])
        check(outcome)
        assert outcome.code == 2 and f"error: {bad}" in outcome.stderr, outcome


@pytest.mark.parametrize(("template", "message"), [
    ("{% if %}\n", "t.j2:1: Expected an expression, got 'end of statement block'"),
    ("{{ nope }}\n", "t.j2 fails to render (UndefinedError: 'nope' is undefined)"),
    ("{{ 1/0 }}\n", "t.j2 fails to render (ZeroDivisionError: division by zero)"),
    (b"\xff\xfe\n", "cannot read 't.j2' in"),
])
def test_site_template_that_is_broken(template: str | bytes, message: str) -> None:
    with workdir() as tmp:
        path = tmp / "t.j2"
        if isinstance(template, bytes):
            path.write_bytes(template)
        else:
            path.write_text(template, encoding="utf-8")
        site = tmp / "site.yaml"
        site.write_text(dump({**BASE_SITE, "slurm": {**BASE_SITE["slurm"],
                                                     "sbatch_template": "./t.j2"}}))
        outcome = run_cli(["render", str(EXAMPLE_JOB), "--site", str(site)])
        check(outcome)
        assert outcome.code == 2 and "error: slurm.sbatch_template: " in outcome.stderr, outcome
        assert message in outcome.stderr, outcome
