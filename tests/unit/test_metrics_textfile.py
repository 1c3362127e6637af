"""The Prometheus textfiles (parsed with prometheus-client's own parser), MFU and the
Young/Daly interval, and `gantry metrics` / `gantry report --json` on a hand-built job."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from launcher.job_spec import ModelSpec
from launcher.report import textfile
from launcher.report.efficiency import checkpoint_advice, flops_per_token, mfu
from launcher.report.goodput import job_goodput
from launcher.report.read_cache import ReadCache
from launcher.site_config import load_site
from tests.unit.goodput_dirs import JOB, T0, attempt, job_dir, log

REPO = Path(__file__).resolve().parents[2]


def a_job(root: Path, gpus: int = 0) -> Path:
    path = job_dir(root, state={"state": "COMPLETED", "terminal": True})
    log(path, [(T0 + 10, f"job {JOB} (restart 0 of at most 3) on n[1-3]"),
               (T0 + 11, "launching pp=2 x dp=1 on n1,n2"),
               (T0 + 14, "training step failed with exit code 137"),
               (T0 + 15, "recovery 1 of 3 in this allocation: relaunching on n1,n3"),
               (T0 + 15.5, "launching pp=2 x dp=1 on n1,n3"),
               (T0 + 21, "training finished")])
    first = attempt(path, f"{JOB}-0", T0 + 12, [(1, T0 + 12.5, 0.0), (2, T0 + 13, 0.0),
                                                (3, T0 + 13.5, 0.25)], checkpoints=(2,))
    second = attempt(path, f"{JOB}-0.1", T0 + 17, [(3, T0 + 18, 0.0), (4, T0 + 19, 0.0)],
                     end=(T0 + 19.5, 0.25), checkpoints=(4,))
    for run, nodes in ((first, ("n1", "n2")), (second, ("n1", "n3"))):
        (run / "ranks").mkdir()
        for rank, node in enumerate(nodes):
            (run / "ranks" / f"{rank}.start").write_text(json.dumps(
                {"rank": rank, "node": node, "pid": 1, "time": T0}))
        (run / "launch_nodes").write_text(",".join(nodes) + "\n")
    site = root / "site.yaml"
    site.write_text(yaml.safe_dump({
        "name": "s", "nodes": {"names": "n[1-3]", "gpus_per_node": gpus,
                               "gpu_model": "NVIDIA H200" if gpus else None},
        "metrics": {"textfile_dir": "prom"}}))
    (path / "request.json").write_text(json.dumps({"site_path": str(site), "ranks": 2,
                                                   "ranks_per_node": 1}))
    (path / "spec.yaml").write_text(yaml.safe_dump({
        "name": "tiny", "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 64,
                                  "seq_len": 16},
        "parallelism": {"pp": 2, "micro_batches": 2}, "checkpoint": {"interval": 2}}))
    return path


def families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {f.name: [(s.labels, s.value) for s in f.samples]
            for f in text_string_to_metric_families(text)}


def test_textfiles_parse_and_carry_the_goodput(tmp_path: Path) -> None:
    path = a_job(tmp_path)
    out = tmp_path / "prom"
    out.mkdir()
    (out / textfile.textfile_name(JOB, "n2")).write_text("stale\n")
    (out / "gantry_71_n2.prom").write_text("another job\n")
    written = textfile.write_textfiles(path, out, now=T0 + 30)
    assert [p.name for p in written] == [f"gantry_{JOB}_n1.prom", f"gantry_{JOB}_n3.prom"]
    assert sorted(p.name for p in out.iterdir()) == ["gantry_71_n2.prom", "gantry_7_n1.prom",
                                                     "gantry_7_n3.prom"]  # n2 left the job
    lead = families(written[0].read_text())
    other = families(written[1].read_text())
    goodput = job_goodput(path)
    parts = {labels["part"]: value for labels, value in lead["gantry_goodput_seconds"]}
    assert parts == {k: v / 1e6 for k, v in goodput.parts_us().items()}
    assert math.isclose(sum(parts.values()), lead["gantry_wall_seconds"][0][1], abs_tol=1e-9)
    assert lead["gantry_wall_seconds"][0][1] == 21.0
    assert lead["gantry_ettr_ratio"][0][1] == pytest.approx(goodput.ettr)
    assert lead["gantry_step"][0] == ({"job": JOB, "node": "n1"}, 4.0)
    assert lead["gantry_failed_steps"][0][1] == 1.0
    assert lead["gantry_checkpoints"][0][1] == 2.0
    assert lead["gantry_loss"][0][1] == pytest.approx(5.0 - 0.4)
    assert "gantry_goodput_seconds" not in other and "gantry_step" not in other
    timers = {(s["rank"], s["timer"]): v for s, v in other["gantry_rank_timer_seconds"]}
    assert timers[("1", "compute")] == 0.6 and ("0", "compute") not in timers
    assert other["gantry_node_in_job"][0][1] == 1.0
    assert lead["gantry_job_info"][0][0] == {"job": JOB, "node": "n1", "name": "tiny",
                                             "attempt": f"{JOB}-0.1"}
    gone = textfile.write_textfiles(path, out, ["n2"], now=T0 + 30)
    assert families(gone[0].read_text())["gantry_node_in_job"][0][1] == 0.0
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp file left


def test_health_events_are_counted_per_node(tmp_path: Path) -> None:
    path = a_job(tmp_path)
    health = path / "runs" / f"{JOB}-0" / "node-health"  # the run monitor's files
    health.mkdir()
    (health / "n3.jsonl").write_text(
        '{"time": 1, "node": "n3", "check": "monitor", "grade": "INFO"}\n'
        '{"time": 1, "node": "n3", "check": "gpu.xid", "grade": "FAIL"}\n{"torn\n'
        '{"time": 2, "node": "n3", "check": "gpu.xid", "grade": "FAIL"}\n')
    out = tmp_path / "prom"
    out.mkdir()
    n3 = families(textfile.write_textfiles(path, out, ["n3"])[0].read_text())
    assert n3["gantry_health_events"] == [({"job": JOB, "node": "n3", "check": "gpu.xid",
                                            "grade": "FAIL"}, 2.0)]


def test_a_node_rewriting_with_a_cache_writes_what_a_whole_read_writes(tmp_path: Path) -> None:
    path = a_job(tmp_path)
    newest = path / "runs" / f"{JOB}-0.1"
    (newest / "node-health").mkdir()
    cached, whole = tmp_path / "cached", tmp_path / "whole"
    cached.mkdir()
    whole.mkdir()
    caches = {"n1": ReadCache(), "n3": ReadCache()}  # one per node's monitor
    for sample in range(4):
        when = T0 + 30 + sample
        for node, cache in caches.items():
            textfile.write_textfiles(path, cached, [node], now=when, cache=cache)
        textfile.write_textfiles(path, whole, now=when)
        for node in caches:
            name = textfile.textfile_name(JOB, node)
            assert (cached / name).read_text() == (whole / name).read_text(), (sample, node)
        with open(path / "runs" / "tiny" / "metrics.jsonl", "a", encoding="utf-8") as handle:
            handle.write('me": 1}\n' if sample else "")  # the torn line completed
            handle.write(json.dumps({"step": 5 + sample, "loss": 1.0, "time": T0 + 19.2,
                                     "tokens_per_s": 9.0, "ranks": []}) + "\n")
            handle.write('{"step": 9, "ti')  # torn: the next sample sees it so
        with open(newest / "node-health" / "n3.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"time": when, "node": "n3", "check": f"c{sample % 2}",
                                     "grade": "WARN"}) + "\n")
        with open(path / "recoveries.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"attempt": f"{JOB}-0", "decision": "relaunch"}) + "\n")
    lead = families((cached / textfile.textfile_name(JOB, "n1")).read_text())
    assert lead["gantry_recoveries"][0][1] == 3.0
    n3 = families((cached / textfile.textfile_name(JOB, "n3")).read_text())
    assert sum(v for _, v in n3["gantry_health_events"]) == 3.0
    assert textfile.read_job_metrics(path, nodes=["n3"]).goodput is None  # not rank 0's node


def test_label_values_are_escaped() -> None:
    text = textfile.render([textfile.Family("gantry_x_seconds", "gauge", 'a \\ b\nc',
                                            (({"job": 'q"\\\n'}, math.nan),))])
    (family,) = text_string_to_metric_families(text)
    assert family.samples[0].labels == {"job": 'q"\\\n'} and math.isnan(family.samples[0].value)


def test_mfu_and_young_daly(tmp_path: Path) -> None:
    model = ModelSpec(n_layer=24, n_head=16, n_embd=1024, vocab_size=50257, seq_len=1024)
    assert flops_per_token(model) == 6 * (24 * 12 * 1024**2 + 50257 * 1024) + 12 * 24 * 1024**2
    path = a_job(tmp_path, gpus=8)
    site = load_site(tmp_path / "site.yaml").config
    result = mfu(model, 171_800.0, 1, site)
    assert result is not None and result.peak_tflops == 989.4
    assert result.value == pytest.approx(flops_per_token(model) * 171_800 / 1e12 / 989.4)
    cpu = load_site(REPO / "site_configs" / "local.yaml").config
    assert mfu(model, 1.0, 1, cpu) is None
    goodput = job_goodput(path)
    advice = checkpoint_advice(goodput, 0.5, 2, 2, site)
    held = 21.0 - 10.0
    assert advice.cost_s == pytest.approx(0.25) and advice.mtbf_s == pytest.approx(held)
    assert advice.interval_s == pytest.approx(math.sqrt(2 * 0.25 * held))
    assert advice.interval_steps == round(math.sqrt(2 * 0.25 * held) / 0.5)
    clean = checkpoint_advice(goodput._replace(failures=0),
                              0.5, 2, 2, site)
    assert clean.interval_s is None and "not enough data" in clean.describe()


def gantry(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=REPO, text=True,
                          capture_output=True, timeout=120)


def test_metrics_and_report_commands(tmp_path: Path) -> None:
    path = a_job(tmp_path)
    refused = gantry("metrics", str(path))
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith("error: metrics.textfile_dir: ")
    assert "is not a directory" in refused.stderr and "Traceback" not in refused.stderr
    (tmp_path / "prom").mkdir()
    done = gantry("metrics", str(path), "--json")  # the site's dir, relative to its file
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["nodes"] == ["n1", "n3"] and data["lead_node"] == "n1"
    assert data["files"] == [str(tmp_path / "prom" / f"gantry_{JOB}_{n}.prom")
                             for n in ("n1", "n3")]
    assert data["goodput"]["wall_us"] == 21_000_000
    report = gantry("report", str(path), "--json", "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    result = json.loads(report.stdout)
    assert result["goodput"]["wall_us"] == sum(result["goodput"]["parts_us"].values())
    assert result["goodput"]["parts_s"]["recovery"] == pytest.approx(2.0)
    assert result["mfu"] is None
    assert result["checkpoint_interval"]["configured_steps"] == 2
    page = (tmp_path / "report" / "report.html").read_text()
    assert "<h2>Goodput</h2>" in page and "ETTR" in page


def test_the_newest_step_skips_a_line_still_being_written(tmp_path: Path) -> None:
    path = a_job(tmp_path)
    with open(path / "runs" / "tiny" / "metrics.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"step": 5, "loss": 1.0, "ti')
    metrics = textfile.read_job_metrics(path)
    assert metrics.last is not None and metrics.last.step == 4
    long = tmp_path / "long.jsonl"
    long.write_text("".join(f'{{"step": {i}, "pad": "{"x" * 999}"}}\n' for i in range(200))
                    + '{"partial')
    assert json.loads(textfile._tail_lines(long, 100)[-1])["step"] == 199
