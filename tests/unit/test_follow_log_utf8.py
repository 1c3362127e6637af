"""`gantry logs --follow` copies a growing log without cutting characters: a read that ends
inside a multi-byte UTF-8 character holds it back for the next read, whatever the split."""

from __future__ import annotations

import io
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from launcher.job_cli import copy_new_text, whole_characters


@given(st.text(), st.data())
def test_two_reads_at_any_split_give_the_text(text: str, data: st.DataObject) -> None:
    raw = text.encode("utf-8")
    cut = data.draw(st.integers(0, len(raw)))
    first = whole_characters(raw[:cut])
    assert cut - 3 <= first <= cut
    assert (raw[:first].decode("utf-8") + raw[first:].decode("utf-8")) == text


def test_a_half_written_character_waits_for_its_last_byte(tmp_path: Path) -> None:
    log = tmp_path / "slurm-7.out"
    out = io.StringIO()
    log.write_bytes("loss \u2193 3.1 caf".encode() + b"\xc3")
    offset = copy_new_text(log, 0, out)
    assert out.getvalue() == "loss \u2193 3.1 caf"
    with log.open("ab") as handle:
        handle.write(b"\xa9\n\xe2\x86")
    offset = copy_new_text(log, offset, out)
    assert out.getvalue() == "loss \u2193 3.1 caf\u00e9\n"
    assert copy_new_text(log, offset, out, final=True) == log.stat().st_size
    assert out.getvalue().endswith("\n\ufffd")  # the job ended: what is left is shown as is


def test_bytes_that_never_complete_are_not_held_back() -> None:
    assert whole_characters(b"ok\x80\x80\x80\x80") == 6  # stray continuation bytes
    assert whole_characters(b"ok\xa9") == 3
