"""What gantry prints is never read as rich markup: tool output and paths with brackets
("[drm] ...", "[/dev/nvidia0]") print as they are, on a terminal (the table) and piped (plain
lines), instead of vanishing as style tags or failing as unmatched closing tags."""

from __future__ import annotations

import io

import pytest
from rich.table import Table

from launcher.commands.preflight import print_verdict
from launcher.console import make_console
from launcher.preflight.result import CheckResult
from launcher.preflight.verdict import NodeVerdict

OBSERVED = "Xid 79 on [/dev/nvidia0] [drm] GPU lost [bold]"


def bracketed_verdict() -> NodeVerdict:
    check = CheckResult("gpu.xid", "FAIL", OBSERVED, "no new Xid [red]",
                        action="drain [/] and reboot")
    return NodeVerdict(node="n[1]", level="quick", status="FAIL",
                       started_at="2026-12-03T12:00:00+00:00", duration_s=0.1,
                       gantry_version="0", gpu_source="none", checks=[check])


def test_piped_verdict_prints_brackets_as_they_are(capsys: pytest.CaptureFixture[str]) -> None:
    print_verdict(bracketed_verdict())
    out = capsys.readouterr().out
    assert f"FAIL gpu.xid: {OBSERVED} (expected no new Xid [red]) -> drain [/] and reboot" in out
    assert "preflight n[1] (quick): FAIL" in out


def test_a_terminal_table_keeps_the_brackets() -> None:
    console = make_console()
    console.file = io.StringIO()
    table = Table()
    table.add_column("observed")
    table.add_row(OBSERVED)
    console.print(table)
    assert "[/dev/nvidia0] [drm] GPU lost [bold]" in console.file.getvalue()
