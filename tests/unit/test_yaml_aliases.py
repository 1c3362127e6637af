"""YAML aliases stay bounded: a few hundred bytes of nested aliases (9 aliases of 9 aliases
... of a list, 9^9 values) are refused at load as one `error:` line naming the file, for every
kind of typed field of the job spec and the site config, and error messages quote a value by
writing only its first characters. Anchors reused normally and `<<` merges still load."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher.errors import UserInputError, brief
from launcher.job_spec import load_job
from launcher.site_config import DEFAULT_SITE, load_site
from launcher.typed_config import MAX_ALIAS_VALUES, parse_yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "gpt2-tiny-pp2-dp2.yaml"
MEMORY_LIMIT = 1 << 30
"""Address space of the gantry under test: expanding 9^9 values takes many GiB, so a gantry
without the budget fails here (MemoryError, or the timeout) instead of taking the host."""


def laughs(levels: int = 9) -> str:
    """A flow list whose last item holds 9^(levels - 1) x 9 strings through nested aliases."""
    parts = ["&a0 [" + ", ".join(["lol"] * 9) + "]"]
    parts += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


def merge_laughs(levels: int = 9) -> str:
    """A flow mapping whose ``<<`` merges fold 9^levels key pairs through nested aliases."""
    parts = ["&m0 {" + ", ".join(f"k{i}: v" for i in range(9)) + "}"]
    parts += [f"&m{i} {{<<: [" + ", ".join([f"*m{i - 1}"] * 9) + "]}" for i in range(1, levels)]
    return "{x: [" + ", ".join(parts) + "], y: {<<: [" + ", ".join([f"*m{levels - 1}"] * 9) + "]}}"


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def render(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launcher", "render", *args], capture_output=True, text=True,
        cwd=cwd, check=False, timeout=120, preexec_fn=limit_memory,
        env={**os.environ, "PYTHONPATH": str(REPO)})


def one_error(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    assert result.returncode == 2
    return lines[0]


def edited(data: dict[str, object], dotted: str, value: str) -> str:
    """``data`` as YAML with the field at ``dotted`` replaced by the YAML text ``value``."""
    marker = "__HOSTILE__"
    *parents, last = dotted.split(".")
    target = data
    for key in parents:
        target = target.setdefault(key, {})  # type: ignore[assignment]
    target[last] = marker
    return yaml.safe_dump(data, default_flow_style=False).replace(marker, value)


JOB_FIELDS = [
    ("name", laughs()),                                 # a string field
    ("parallelism.stage_layers", f"[{laughs()}]"),      # a list field
    ("resources.dependencies", laughs()),               # a list field given lists
    ("env", laughs()),                                  # a mapping field
    ("env", f"{{A: {laughs()}}}"),                      # a mapping's value
    ("model", merge_laughs()),                          # a dataclass, through << merges
]


@pytest.mark.parametrize(("field", "value"), JOB_FIELDS)
def test_nested_aliases_in_a_job_field_are_one_line(
    tmp_path: Path, field: str, value: str
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(edited(yaml.safe_load(EXAMPLE.read_text()), field, value))
    line = one_error(render([str(job)], tmp_path))
    assert line.startswith(f"error: {job}:"), line
    assert f"aliases repeat more than {MAX_ALIAS_VALUES} values" in line


SITE_FIELDS = [
    ("description", laughs()),
    ("slurm.sbatch_options", f"[{laughs()}]"),
    ("mpi.env", laughs()),
    ("preflight.thresholds", f"{{x: {laughs()}}}"),
    ("topology", merge_laughs()),
]


@pytest.mark.parametrize(("field", "value"), SITE_FIELDS)
def test_nested_aliases_in_a_site_field_are_one_line(
    tmp_path: Path, field: str, value: str
) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(edited(yaml.safe_load(DEFAULT_SITE.read_text()), field, value))
    line = one_error(render(["--site", str(site), str(EXAMPLE)], tmp_path))
    assert line.startswith(f"error: {site}:"), line
    assert f"aliases repeat more than {MAX_ALIAS_VALUES} values" in line


def test_an_alias_inside_its_own_anchor_is_refused() -> None:
    with pytest.raises(UserInputError) as info:
        parse_yaml("name: &a [x, *a]\n", "job.yaml")
    assert str(info.value) == ("job.yaml:1: alias *a is used inside its own anchor "
                               "(a value cannot contain itself)")


def test_aliases_just_under_the_budget_load_and_one_more_is_refused() -> None:
    # an anchored list of 99 strings is 100 values; aliased 100 times: MAX_ALIAS_VALUES
    items = ", ".join(["s"] * 99)
    uses = MAX_ALIAS_VALUES // 100
    text = f"a: &a [{items}]\nb: [{', '.join(['*a'] * uses)}]\n"
    assert len(parse_yaml(text, "ok.yaml")["b"]) == uses
    with pytest.raises(UserInputError, match=r"^more\.yaml:2: aliases repeat more than"):
        parse_yaml(text.replace("*a]", "*a, *a]"), "more.yaml")


def test_anchors_and_merges_used_normally_still_load(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    del data["resources"], data["train"]
    job = tmp_path / "job.yaml"
    job.write_text(
        yaml.safe_dump(data)
        + 'train: &train {steps: 20, lr: 1.0e-3, lr_schedule: cosine, warmup_steps: 2}\n'
        + 'resources: {<<: {nodes: 4, spares: 1, time_limit: &t "00:10:00"},'
        + ' dependencies: [&dep "afterok:1", *dep]}\n'
        + "env: {A: &v one, B: *v, C: *v}\n"
    )
    spec = load_job(job)
    assert spec.resources.nodes == 4 and spec.resources.time_limit == "00:10:00"
    assert spec.resources.dependencies == ["afterok:1", "afterok:1"]
    assert spec.env == {"A": "one", "B": "one", "C": "one"}
    assert spec.train.steps == 20


class _NeverShown:
    """A value whose repr must not be asked for: it lies beyond what a message quotes."""

    def __repr__(self) -> str:
        raise AssertionError("brief() wrote more of the value than it shows")


def test_brief_writes_only_the_start_of_a_value() -> None:
    assert brief(["lol"] * 100 + [_NeverShown()]) == (
        repr(["lol"] * 100)[:77] + "... (101 items)")
    assert brief({"a": [["x" * 200, _NeverShown()]]}).endswith("xxx... (1 items)")
    assert brief(10 ** 20000) == "<an integer of about 20001 digits>"  # repr: over 4300 digits
    assert brief(b"x" * 10**6).endswith("... (1000000 bytes)")
    itself: list[object] = []
    itself.append(itself)
    assert brief(itself).endswith("[[[... (1 items)")
    assert brief({"a": (1,), "b": {2}}) == repr({"a": (1,), "b": {2}})


LONG = "x" * 100_000 + "\n"


@pytest.mark.parametrize(
    ("kind", "field", "value"),
    [
        ("job", "name", LONG),
        ("job", "resources.time_limit", LONG),
        ("site", "mpi.env", {LONG: "1"}),
        ("site", "plugins.preflight_env", {"A": LONG}),
        ("site", "build.cuda_archs", [LONG]),
        ("site", "topology.switches", [{"name": "s1", "switches": "x" * 100_000}]),
    ],
)
def test_a_long_value_checked_after_loading_is_cut_in_the_message(
    tmp_path: Path, kind: str, field: str, value: object
) -> None:
    source = EXAMPLE if kind == "job" else DEFAULT_SITE
    data = yaml.safe_load(source.read_text())
    *parents, last = field.split(".")
    target = data
    for key in parents:
        target = target.setdefault(key, {})
    target[last] = value
    path = tmp_path / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserInputError) as info:
        load_job(path) if kind == "job" else load_site(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message[:300]
    assert "(100001 characters)" in message or "(100000 characters)" in message, message[:300]
    assert len(message) < 400, message[:300]


def test_a_long_value_refused_for_an_sbatch_line_is_cut_in_the_message(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["resources"]["partition"] = "x y" * 50_000
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(data))
    line = one_error(render([str(job)], tmp_path))
    assert line.startswith(f"error: {job}: resources.partition: 'x yx y"), line[:300]
    assert "(150000 characters) is not allowed in an #SBATCH line" in line
    assert len(line) < 400, line[:300]
