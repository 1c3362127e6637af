"""The generated gantry_site.h carries the site name as one C string literal, whatever the
name holds: compiled by the real C compiler, the name comes back byte for byte and no text
of it becomes a C line (a #define, a line continuation, a trigraph)."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from launcher import build
from launcher.cmake import find_tool
from launcher.site_config import DEFAULT_SITE, LoadedSite, load_site

HOSTILE = [
    'x"\n#define GANTRY_SITE_NODES 999\n#define GANTRY_OTHER "',  # ends the literal, adds lines
    "x\\",                        # a backslash that would escape the closing quote
    "x\\\n#define GANTRY_SITE_NODES 999",  # a line continuation
    "x??/\n#define GANTRY_SITE_NODES 999",  # ??/ is a backslash under -trigraphs
    "x\r#define GANTRY_SITE_NODES 999",
    "x */ int gantry_evil; /*",
    "caf\u00e9 \u2028 \U0001f600",  # non-ASCII, a Unicode line separator
    "\t%s%n",
]

PROGRAM = r"""
#include <stdio.h>
#include "gantry_site.h"
int main(void) {
    const unsigned char *p = (const unsigned char *)GANTRY_SITE_NAME;
    printf("%d\n", GANTRY_SITE_NODES);
    for (; *p; p++) printf("%02x", *p);
    printf("\n");
#ifdef GANTRY_OTHER
    printf("other\n");
#endif
    return 0;
}
"""


def _with_name(name: str) -> LoadedSite:
    site = load_site(DEFAULT_SITE)
    return dataclasses.replace(site, config=dataclasses.replace(site.config, name=name))


def _compiled(tmp_path: Path, header: str) -> list[str]:
    (tmp_path / "gantry_site.h").write_text(header)
    (tmp_path / "main.c").write_text(PROGRAM)
    exe = tmp_path / "main"
    compiler = find_tool("CC", "cc")
    subprocess.run([compiler, "-std=c99", "-trigraphs", "-Werror", "-I", str(tmp_path),
                    str(tmp_path / "main.c"), "-o", str(exe)], check=True,
                   capture_output=True, text=True)
    return subprocess.run([str(exe)], check=True, capture_output=True,
                          text=True).stdout.splitlines()


@pytest.mark.parametrize("name", HOSTILE)
def test_any_site_name_is_one_c_string_in_the_header(tmp_path: Path, name: str) -> None:
    plain = build.site_header(_with_name("local")).splitlines()
    header = build.site_header(_with_name(name))
    lines = header.splitlines()
    assert len(lines) == len(plain)
    assert [ln for ln in lines if not ln.startswith("#define GANTRY_SITE_NAME ")] == [
        ln for ln in plain if not ln.startswith("#define GANTRY_SITE_NAME ")]
    out = _compiled(tmp_path, header)
    assert out == ["8", name.encode().hex()]  # the local site's 8 nodes; nothing else defined


def test_c_string_keeps_plain_names_readable() -> None:
    assert build.c_string("dc1-h200.prod") == '"dc1-h200.prod"'
    assert build.c_string('a"b\\c\n?') == '"a\\042b\\134c\\012\\077"'
