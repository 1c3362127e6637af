"""`gantry train`'s own inputs are checked before any rank starts: one `error:` line, exit 2
(a --run-dir or checkpoint.dir that is a file failed only at the first write, after training;
a library that is not gantry's raised from ctypes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_input_fuzz import run_cli

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "gpt2-tiny-pp2-dp2.yaml"


@pytest.mark.parametrize(
    ("extra", "spec_edit", "message"),
    [
        (["--max-steps", "0"], None, "--max-steps: 0 is not allowed (expected >= 1)"),
        (["--run-dir", "{tmp}/file"], None, "--run-dir: {tmp}/file exists and is not a "
         "directory"),
        ([], ("checkpoint: {dir: checkpoints,", "checkpoint: {dir: file,"),
         "{tmp}/job.yaml: checkpoint.dir: {tmp}/file exists and is not a directory"),
        (["--lib", "{tmp}/file"], None, "{tmp}/file: cannot load the native library ("),
        (["--lib", "/lib/x86_64-linux-gnu/libc.so.6"], None,
         "/lib/x86_64-linux-gnu/libc.so.6: not gantry's native library (no gt_"),
    ],
)
def test_train_inputs_are_one_line_before_training(
    tmp_path: Path, extra: list[str], spec_edit: tuple[str, str] | None, message: str
) -> None:
    (tmp_path / "file").write_text("not a directory, not a library")
    text = EXAMPLE.read_text().replace("pp: 2, dp: 2,", "pp: 1, dp: 1,")
    if spec_edit is not None:
        assert spec_edit[0] in text
        text = text.replace(*spec_edit)
    job = tmp_path / "job.yaml"
    job.write_text(text)
    if "libc.so.6" in " ".join(extra) and not Path("/lib/x86_64-linux-gnu/libc.so.6").is_file():
        pytest.skip("no /lib/x86_64-linux-gnu/libc.so.6 on this machine")
    outcome = run_cli(["train", str(job), *[e.format(tmp=tmp_path) for e in extra]])
    assert outcome.code == 2, outcome
    lines = outcome.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: " + message.format(tmp=tmp_path)), \
        outcome.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe[0]\n", "{path}: cannot read (invalid start byte at byte 0; expected UTF-8 "
         "text)"),
        (b"[" * 100_000 + b"]" * 100_000 + b"\n", "{path}: nested too deeply to read"),
        (("[" + ", ".join(["2"] * 100_000) + "]\n").encode(),
         "{path}: [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2"
         "... (100000 items) is not allowed (expected each world rank 0..0 once)"),
    ],
)
def test_a_rank_order_file_that_cannot_be_read_is_one_line(tmp_path: Path, content: bytes,
                                                           message: str) -> None:
    """--rank-order: bytes that are not UTF-8 raised UnicodeDecodeError, 100,000-deep nesting
    RecursionError, a long list became a megabyte-long error line."""
    job = tmp_path / "job.yaml"
    job.write_text(EXAMPLE.read_text().replace("pp: 2, dp: 2,", "pp: 1, dp: 1,"))
    order = tmp_path / "order.yaml"
    order.write_bytes(content)
    outcome = run_cli(["train", str(job), "--rank-order", str(order),
                       "--run-dir", str(tmp_path / "run")])
    assert outcome.code == 2, outcome
    assert outcome.stderr.splitlines() == ["error: " + message.format(path=order)]
