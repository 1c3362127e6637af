"""The Python mirror of the native switch table (launcher/native/runtime_config.py) agrees with
the C table it mirrors (native/src/runtime_config.c), and no other native source reads a
GANTRY_* switch: the library reads them once, through that table."""

from __future__ import annotations

import re
from pathlib import Path

from launcher.native.runtime_config import SWITCHES

NATIVE = Path(__file__).resolve().parents[2] / "native"
TABLE_LINE = re.compile(
    r'\{"(GANTRY_\w+)", SW_(FLAG|INT|CHOICE|MB), F\(\w+\), ([\d.]+), (-?\d+), (-?\d+), '
    r'(NULL|"[^"]*"), (NULL|"[^"]*")\},')
KINDS = {"FLAG": "flag", "INT": "int", "CHOICE": "choice", "MB": "mb"}


Row = tuple[str, str, tuple[int, int] | None, tuple[str, ...]]


def c_table() -> dict[str, Row]:
    """name -> (kind, default as recorded, range (not of a choice), choices) from
    runtime_config.c."""
    source = (NATIVE / "src" / "runtime_config.c").read_text()
    body = source[source.index("k_switches[] = {"):source.index("};", source.index("k_switches"))]
    table = {}
    for match in TABLE_LINE.finditer(body):
        name, kind, fallback, lo, hi, choices, _note = match.groups()
        options = tuple(choices.strip('"').split("|")) if choices != "NULL" else ()
        default = options[int(float(fallback))] if options else f"{float(fallback):g}"
        bounds = None if options else (int(lo), int(hi))
        table[name] = (KINDS[kind], default, bounds, options)
    assert body.count("{\"GANTRY_") == len(table), "a table line the pattern does not read"
    return table


def test_python_mirror_matches_the_c_table() -> None:
    table = c_table()
    mirror = {s.name: (s.kind, s.default, None if s.choices else (s.lo, s.hi), s.choices)
              for s in SWITCHES}
    assert mirror == table
    assert [s.name for s in SWITCHES] == sorted(table)
    assert all(s.doc for s in SWITCHES)


def test_only_the_table_reads_gantry_switches() -> None:
    readers = []
    for path in sorted((NATIVE / "src").rglob("*")):
        if path.suffix not in {".c", ".cu", ".cpp", ".h"} or path.name == "runtime_config.c":
            continue
        text = path.read_text()
        if re.search(r'getenv\(\s*"GANTRY_', text) or re.search(r'gt_env_(flag|int)\(', text):
            readers.append(path.relative_to(NATIVE).as_posix())
    readers = [r for r in readers if r not in {"src/env_flag.c", "src/env_flag.h"}]
    assert readers == [], f"GANTRY_* switches read outside runtime_config.c: {readers}"
