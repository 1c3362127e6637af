"""The report as one self-contained HTML page: figures inlined as base64 PNG, tables, no
scripts, no fonts or styles fetched from anywhere."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

from launcher.report.timeline import PHASES

_STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif;
       margin: 2em auto; max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.8em; }
table { border-collapse: collapse; margin: 0.6em 0; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25em 0.9em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #eee; }
code { background: #f4f4f4; padding: 0 0.25em; }
.note { color: #666; font-size: 0.9em; }
"""


@dataclass(frozen=True)
class Section:
    """A titled table of text cells (the first column a name, the others numbers but the
    last)."""

    title: str
    header: Sequence[str]
    rows: Sequence[Sequence[str]]
    note: str = ""


def _image(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{data}">'


def _table(header: Sequence[str], rows: Sequence[Sequence[str]],
           numeric: Sequence[bool] | None = None) -> str:
    flags = list(numeric or [False] * len(header))
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(
            f'<td class="num">{escape(c)}</td>' if flags[i] else f"<td>{escape(c)}</td>"
            for i, c in enumerate(row)) + "</tr>"
        for row in rows)
    header_row = f"<tr>{head}</tr>" if any(header) else ""
    return f"<table>{header_row}{body}</table>"


def render_page(title: str, summary: Sequence[tuple[str, str]], loss_png: Path,
                timeline_png: Path | None, totals: Mapping[int, Mapping[str, float]],
                attempts: Sequence[tuple[str, str, str]], trace_name: str | None,
                notes: Sequence[str], sections: Sequence[Section] = ()) -> str:
    """The HTML text. ``attempts``: (run directory, steps, loss range) rows; ``sections``:
    tables shown after the summary."""
    parts = [
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        _table(["", ""], [list(row) for row in summary]),
    ]
    for section in sections:
        numeric = [False] + [True] * (len(section.header) - 2) + [False]
        parts += [f"<h2>{escape(section.title)}</h2>",
                  _table(section.header, [list(r) for r in section.rows], numeric)]
        if section.note:
            parts.append(f'<p class="note">{escape(section.note)}</p>')
    parts += [
        "<h2>Loss and throughput</h2>", _image(loss_png, "loss curve"),
    ]
    if timeline_png is not None:
        parts += ["<h2>Pipeline timeline</h2>", _image(timeline_png, "pipeline timeline")]
    if totals:
        rows = []
        for rank in sorted(totals):
            seconds = totals[rank]
            whole = sum(seconds.values()) or 1.0
            rows.append([f"rank {rank}"] + [f"{seconds.get(p, 0.0) * 1e3:.1f} ms "
                                             f"({seconds.get(p, 0.0) / whole:.0%})"
                                             for p in PHASES])
        parts += ["<h2>Time per phase and rank (all traced steps)</h2>",
                  _table(["rank", *PHASES], rows, [False] + [True] * len(PHASES))]
    if attempts:
        parts += ["<h2>Attempts</h2>",
                  _table(["run directory", "steps", "loss"], [list(a) for a in attempts])]
    if trace_name is not None:
        parts.append(
            f'<h2>Trace</h2><p><a href="{escape(trace_name)}"><code>{escape(trace_name)}'
            "</code></a> (next to this page) is a Chrome trace: open it in Perfetto "
            "(ui.perfetto.dev, <i>Open trace file</i>) or chrome://tracing to see every "
            "rank's forward, backward, send, receive and wait.</p>")
    if notes:
        parts.append('<h2>Notes</h2><ul class="note">'
                     + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
