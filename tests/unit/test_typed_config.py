"""Tests for the dataclass loader that validates every YAML gantry reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from launcher.errors import UserInputError
from launcher.typed_config import FieldError, from_mapping, load_dataclass


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
