"""Markdown tables of a tree of frozen config dataclasses: one row per field with its YAML path,
type, default and docstring (the string literal after the field), one section per nested
dataclass. The site-config and job-spec pages are both made with it."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
import types
import typing
from typing import Any

TABLE_HEAD = ["| field | type | default | meaning |", "|---|---|---|---|"]


def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings (the string literal after each field) of a dataclass, fields
    only."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, following in zip(body, [*body[1:], None], strict=True):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            docs[node.target.id] = " ".join(following.value.value.split())
    if dataclasses.is_dataclass(cls):  # not its ClassVars (e.g. REPLACED_KEYS)
        fields = {f.name for f in dataclasses.fields(cls)}
        docs = {name: doc for name, doc in docs.items() if name in fields}
    return docs


def type_hints(cls: type) -> dict[str, Any]:
    """The resolved field types of ``cls`` (names looked up in its own module)."""
    return typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))


def type_name(hint: Any, nested: bool = False) -> str:
    """A field type in words: `a` \\| `b` for literals, list of X, map K → V, section."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in args)
    if origin is list:
        return f"list of {type_name(args[0], nested=True)}"
    if origin is dict:
        return f"map {type_name(args[0])} → {type_name(args[1])}"
    if hint is type(None):
        return "null"
    if dataclasses.is_dataclass(hint):
        return "objects" if nested else "section"
    return getattr(hint, "__name__", str(hint))


def default_text(f: dataclasses.Field[Any]) -> str:
    """The default of a field as YAML would spell it; `required` when it has none."""
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        if dataclasses.is_dataclass(value):
            return "(section)"
    else:
        return "required"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`' if value else '`""`'
    if isinstance(value, list | dict):
        return f"`{value}`" if value else ("`[]`" if isinstance(value, list) else "`{}`")
    return f"`{value}`"


def cell(text: str) -> str:
    """``text`` made safe for one markdown table cell."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _section_of(hint: Any) -> type | None:
    """The dataclass a field opens a section for: itself, or its list's items."""
    inner = typing.get_args(hint)[0] if typing.get_origin(hint) is list else hint
    return inner if isinstance(inner, type) and dataclasses.is_dataclass(inner) else None


def rows(cls: type, prefix: str, sections: list[tuple[str, type]]) -> list[str]:
    """One table row per field of ``cls``; nested dataclasses are appended to ``sections``.
    A section field without a docstring of its own is described by its class's docstring."""
    hints = type_hints(cls)
    docs = field_docs(cls)
    found = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        path = f"{prefix}{f.name}"
        inner = _section_of(hint)
        if inner is not None:
            sections.append((path if inner is hint else f"{path}[]", inner))
        doc = docs.get(f.name) or (" ".join((inner.__doc__ or "").split()) if inner else "")
        found.append(f"| `{path}` | {type_name(hint)} | {default_text(f)} | {cell(doc)} |")
    return found


def tables(root: type) -> list[str]:
    """The "Top level" table of ``root``, then one section per nested dataclass, breadth
    first, each headed by its YAML path and its class docstring."""
    sections: list[tuple[str, type]] = []
    parts = ["## Top level", "", *TABLE_HEAD, *rows(root, "", sections), ""]
    while sections:
        path, cls = sections.pop(0)
        parts += [f"## `{path}`", "", " ".join((cls.__doc__ or "").split()), "",
                  *TABLE_HEAD, *rows(cls, f"{path}.", sections), ""]
    return parts


def undocumented(root: type) -> list[str]:
    """``Class.field`` of every field under ``root`` that has no docstring."""
    missing: list[str] = []
    todo, seen = [root], set()
    while todo:
        cls = todo.pop(0)
        if cls in seen:
            continue
        seen.add(cls)
        docs = field_docs(cls)
        hints = type_hints(cls)
        for f in dataclasses.fields(cls):
            if not docs.get(f.name):
                missing.append(f"{cls.__name__}.{f.name}")
            inner = _section_of(hints[f.name])
            if inner is not None:
                todo.append(inner)
    return missing
