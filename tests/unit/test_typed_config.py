"""Tests for the dataclass loader that validates every YAML gantry reads."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from launcher.errors import UserInputError, brief
from launcher.typed_config import FieldError, from_mapping, load_dataclass, parse_yaml


@dataclass(frozen=True)
class Inner:
    count: int
    kind: Literal["tree", "block"] = "tree"

    def validate(self) -> None:
        if self.count < 1:
            raise FieldError("count", f"{self.count} is not allowed (expected an integer >= 1)")


@dataclass(frozen=True)
class Outer:
    name: str
    inner: Inner
    tags: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    ratio: float | None = None


def test_builds_nested_dataclasses() -> None:
    got = from_mapping(
        Outer, {"name": "a", "inner": {"count": 2}, "tags": ["x"], "ratio": 1}, "s.yaml"
    )
    assert got == Outer(name="a", inner=Inner(count=2), tags=["x"], ratio=1.0)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "a", "inner": {"count": 1}, "extra": 1}, "s.yaml: extra: unknown key"),
        ({"name": "a", "inner": {"count": "two"}}, "s.yaml: inner.count: 'two' is not allowed"),
        ({"name": "a", "inner": {"count": True}}, "inner.count: True is not allowed"),
        ({"name": "a", "inner": {"count": 0}}, "inner.count: 0 is not allowed (expected an"),
        ({"name": "a", "inner": {"count": 1, "kind": "ring"}}, "inner.kind: 'ring' is not"),
        ({"inner": {"count": 1}}, "s.yaml: name: is required but missing"),
        ({"name": "a", "inner": {"count": 1}, "tags": ["x", 3]}, "tags[1]: 3 is not allowed"),
        ({"name": "a", "inner": {"count": 1}, "env": {"A": 1}}, "env.A: 1 is not allowed"),
        ([1, 2], "s.yaml: [1, 2] is not allowed"),
    ],
)
def test_rejects_bad_input_with_field_path(data: object, message: str) -> None:
    with pytest.raises(UserInputError) as info:
        from_mapping(Outer, data, "s.yaml")
    assert message in str(info.value)
    assert info.value.exit_status == 2


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: a\ninner: {count: 1\n")
    with pytest.raises(UserInputError, match=r"bad\.yaml:\d+: "):
        load_dataclass(Outer, bad)


def test_missing_file_is_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="no such file"):
        load_dataclass(Outer, tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    ("text", "line", "key", "first"),
    [
        ("name: a\ninner:\n  count: 1\n  count: 2\n", 4, "count", 3),
        ("name: a\ninner: {count: 1, count: 2}\n", 2, "count", 2),
        ("name: a\ninner: {count: 1}\nname: b\n", 3, "name", 1),
    ],
)
def test_a_key_written_twice_is_refused_with_both_lines(
    tmp_path: Path, text: str, line: int, key: str, first: int
) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(UserInputError) as info:
        load_dataclass(Outer, path)
    assert str(info.value) == (f"{path}:{line}: key '{key}' appears twice in one mapping "
                               f"(first on line {first}; each key may appear once)")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("base: &b {count: 1, kind: block}\ninner:\n  <<: *b\n  count: 3\n",
         {"count": 3, "kind": "block"}),
        ("a: &a {count: 1}\nb: &b {kind: block}\ninner: {<<: [*a, *b], count: 2}\n",
         {"count": 2, "kind": "block"}),
        # a merged mapping that itself merges: flattened before its own turn comes
        ("base: &base {count: 1, kind: tree}\nx: {y: &x {<<: *base, count: 2}}\n"
         "inner: {<<: *x}\n", {"count": 2, "kind": "tree"}),
        ("x: {<<: &mid {<<: {count: 1}, count: 2}, kind: block}\ninner: *mid\n", {"count": 2}),
    ],
)
def test_merged_keys_may_still_be_overridden(text: str, expected: dict[str, object]) -> None:
    assert parse_yaml(text, "merge.yaml")["inner"] == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("inner: {<<: {count: 1, count: 2}}\n", "merge.yaml:1: key 'count' appears twice"),
        ("a: &a {count: 1}\ninner: {<<: *a, <<: *a}\n", "merge.yaml:2: key '<<' appears twice"),
        ("{yes: 1, true: 2}\n", "merge.yaml:1: key 'true' appears twice"),
        ("{1: a, 1.0: b}\n", "merge.yaml:1: key '1.0' appears twice"),
    ],
)
def test_keys_written_twice_inside_merges_and_in_other_spellings(text: str, message: str) -> None:
    with pytest.raises(UserInputError, match="^" + re.escape(message)):
        parse_yaml(text, "merge.yaml")


def test_a_long_value_is_cut_in_the_message(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    path.write_text("\n".join(f"user{i}:x:{i}:{i}::/home/user{i}:/bin/sh" for i in range(60)))
    with pytest.raises(UserInputError) as info:
        load_dataclass(Outer, path)
    message = str(info.value)
    assert len(message) < 250, message
    assert message.startswith(f"{path}: 'user0:x:0:0::/home/user0:/bin/sh user1")
    assert "characters) is not allowed (expected a mapping with keys name, inner" in message


def test_brief_keeps_short_values_whole() -> None:
    assert brief("abc") == "'abc'"
    assert brief(list(range(100)), 20) == "[0, 1, 2, 3, 4, 5... (100 items)"
    assert brief("x" * 100, 20) == "'xxxxxxxxxxxxxxxx... (100 characters)"


@pytest.mark.parametrize(("text", "number"), [
    ("3e-4", 3e-4), ("1e5", 1e5), ("6.0e5", 6.0e5), ("-2E+3", -2e3), (".5e-1", 0.05),
    ("1.0e-3", 1e-3), ("0.5", 0.5), ("2", 2.0),
])
def test_a_float_field_reads_numbers_as_ml_configs_write_them(text: str, number: float) -> None:
    """YAML 1.1 (PyYAML) reads ``3e-4`` as a string; a float field takes it as YAML 1.2 does."""
    got = from_mapping(Outer, parse_yaml(f"name: a\ninner: {{count: 1}}\nratio: {text}\n",
                                         "s.yaml"), "s.yaml")
    assert got.ratio == number and isinstance(got.ratio, float)


@pytest.mark.parametrize("text", ["abc", "3e", "e4", "'3e-4 '", "1e999", ".inf", ".nan",
                                  "'0.5'", "'12'", "3e-4x", "'\u0663e1'", "1e5_0"])
def test_a_float_field_takes_no_other_string(text: str) -> None:
    data = parse_yaml(f"name: a\ninner: {{count: 1}}\nratio: {text}\n", "s.yaml")
    with pytest.raises(UserInputError, match=r"^s\.yaml: ratio: .* is not allowed \(expected "
                       r"a finite number\)$"):
        from_mapping(Outer, data, "s.yaml")


def test_a_string_field_keeps_an_exponent_as_text() -> None:
    got = from_mapping(Outer, parse_yaml("name: 1e5\ninner: {count: 1}\nenv: {LR: 3e-4}\n",
                                         "s.yaml"), "s.yaml")
    assert got.name == "1e5" and got.env == {"LR": "3e-4"}
