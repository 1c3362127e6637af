"""Builds frozen dataclasses from parsed YAML, rejecting unknown keys and wrong types.

Every error names the source file, the dotted field path, the offending value and what
is allowed, so that a user sees one line such as
``job.yaml: parallelism.pp: 'two' is not allowed (expected an integer)``.

Supported field types: bool, int, float, str, Literal[...], X | None, list[X],
tuple[X, ...], dict[str, X] and nested dataclasses. A float field also takes the exponent
forms that YAML 1.1 leaves as strings (``lr: 3e-4``), as YAML 1.2 and ML configs read them.
A dataclass may define ``validate(self) -> None`` that raises :class:`FieldError` for
cross-field rules, and ``REPLACED_KEYS`` (a ClassVar: old key -> what took its place) so that
a config written for an older release is told what to write instead.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from launcher.errors import UserInputError, brief
from topology.errors import FieldError as FieldError
from topology.errors import tag_problem
from topology.user_files import require_regular_file

T = TypeVar("T")


def _join(prefix: str, name: str | int) -> str:
    if isinstance(name, int):
        return f"{prefix}[{name}]"
    return f"{prefix}.{name}" if prefix else name


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def key_path(prefix: str, key: Any) -> str:
    """The path of a key found in the user's mapping: ``env.FOO``, or ``env['a b']`` when the
    key is not plain (so that any key, even one with a line break, stays one readable line)."""
    if isinstance(key, str) and _PLAIN_KEY.fullmatch(key) and len(key) <= 64:
        return _join(prefix, key)
    return f"{prefix}[{brief(key, 64)}]"


def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a finite number"
    if tp is str:
        return "a string"
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        parts = [_describe(a) for a in get_args(tp) if a is not type(None)]
        return " or ".join(parts) + " (or null)"
    if origin in (list, tuple):
        return f"a list of {_describe(get_args(tp)[0])}"
    if origin is dict:
        return f"a mapping of names to {_describe(get_args(tp)[1])}"
    if dataclasses.is_dataclass(tp):
        return f"a mapping with keys {', '.join(f.name for f in dataclasses.fields(tp))}"
    return str(tp)


_YAML12_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+", re.ASCII)
"""A number with an exponent that YAML 1.2 reads as a float and YAML 1.1 as a string
(``3e-4``, ``1e5``, ``6.0e5``: 1.1 wants a dot and a signed exponent). A float field takes
it as the number; nothing else written as a string is read as a number."""


def _bad(path: str, value: Any, tp: Any) -> FieldError:
    return FieldError(path, f"{brief(value)} is not allowed (expected {_describe(tp)})")


def _convert(value: Any, tp: Any, path: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise _bad(path, value, tp)
        inner = [a for a in args if a is not type(None)]
        errors: list[FieldError] = []
        for candidate in inner:
            try:
                return _convert(value, candidate, path)
            except FieldError as err:
                errors.append(err)
        if len(inner) == 1:
            raise errors[0]
        raise _bad(path, value, tp)
    if origin is typing.Literal:
        if value in get_args(tp) and type(value) in {type(a) for a in get_args(tp)}:
            return value
        raise _bad(path, value, tp)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise _bad(path, value, tp)
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _bad(path, value, tp)
    if tp is float:
        given = value
        if isinstance(value, str) and _YAML12_FLOAT.fullmatch(value):
            value = float(value)  # 3e-4: YAML 1.1 (PyYAML) reads it as a string
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:  # an integer beyond the float range
                number = math.inf
            if math.isfinite(number):
                return number
        raise _bad(path, given, tp)
    if tp is str:
        if isinstance(value, str) and "\x00" not in value:
            return value
        raise _bad(path, value, tp)
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise _bad(path, value, tp)
        item_tp = get_args(tp)[0]
        items = [_convert(v, item_tp, _join(path, i)) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, Mapping):
            raise _bad(path, value, tp)
        key_tp, val_tp = get_args(tp)
        out: dict[Any, Any] = {}
        for k, v in value.items():
            key = _convert(k, key_tp, key_path(path, k))
            out[key] = _convert(v, val_tp, key_path(path, k))
        return out
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _build(tp, value, path)
    raise TypeError(f"typed_config: unsupported field type {tp!r} at {path}")


def _build(cls: type[T], data: Any, path: str) -> T:
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise _bad(path, data, cls)
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = [k for k in data if k not in fields]
    replaced: Mapping[str, str] = getattr(cls, "REPLACED_KEYS", {})
    if unknown and unknown[0] in replaced:
        raise FieldError(key_path(path, unknown[0]),
                         f"no longer a setting: use {replaced[unknown[0]]}")
    if unknown:
        allowed = ", ".join(fields)
        raise FieldError(
            key_path(path, unknown[0]), f"unknown key (allowed here: {allowed})"
        )
    kwargs: dict[str, Any] = {}
    for name, field in fields.items():
        if name in data:
            kwargs[name] = _convert(data[name], hints[name], _join(path, name))
        elif (
            field.default is dataclasses.MISSING
            and field.default_factory is dataclasses.MISSING
        ):
            raise FieldError(_join(path, name), "is required but missing")
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if callable(validate):
        try:
            validate()
        except FieldError as err:
            raise FieldError(_join(path, err.path), err.message) from None
    return obj


def from_mapping(cls: type[T], data: Any, source: str) -> T:
    """Build ``cls`` from ``data``; raise UserInputError naming ``source`` and the field."""
    try:
        return _build(cls, data, "")
    except FieldError as err:
        raise UserInputError(f"{source}: {err}") from None


MAX_ALIAS_VALUES = 10_000
"""Values (scalars, lists, mappings) that aliases may repeat in one document, counting every
value inside an aliased one: a few anchors reused and ``<<`` merges of defaults stay far below
it; nested aliases (9 aliases of 9 aliases ... of a list: 9^9 values from 300 bytes) do not."""


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Values in ``node`` with every alias inside it written out (memoized in ``sizes`` by node
    id, so that each composed node is counted once however often it is reached)."""
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    while stack:
        current, children_done = stack.pop()
        if id(current) in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(current, yaml.SequenceNode):
            children = list(current.value)
        elif isinstance(current, yaml.MappingNode):
            children = [part for pair in current.value for part in pair]
        if children_done:
            sizes[id(current)] = 1 + sum(sizes[id(child)] for child in children)
        else:
            stack.append((current, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
    return sizes[id(node)]


class _SafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader whose tag constructors fail with a marked YAML error; PyYAML's raise
    plain exceptions without the line (``!!int abc``: ValueError, ``!!bool x``: KeyError, a
    ``!!timestamp`` over two lines: AttributeError); which refuses a key written twice; and
    which refuses aliases that repeat more than MAX_ALIAS_VALUES values in all, or an alias
    inside its own anchor (a list containing itself)."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            node = self.anchors.get(event.anchor)
            if node is not None:
                self._check_alias(str(event.anchor), node, event.start_mark)
            return super().compose_node(parent, index)
        anchor = getattr(event, "anchor", None)
        if anchor is None:
            return super().compose_node(parent, index)
        self._open_anchors.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._open_anchors.discard(anchor)

    def _check_alias(self, anchor: str, node: yaml.Node, mark: Any) -> None:
        if anchor in self._open_anchors:
            raise yaml.composer.ComposerError(
                None, None, f"alias *{anchor[:64]} is used inside its own anchor "
                "(a value cannot contain itself)", mark)
        self._alias_values += _expanded_size(node, self._alias_sizes)
        if self._alias_values > MAX_ALIAS_VALUES:
            raise yaml.composer.ComposerError(
                None, None, f"aliases repeat more than {MAX_ALIAS_VALUES} values (at alias "
                f"*{anchor[:64]}; write the values out, or alias fewer of them)",
                mark)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (yaml.YAMLError, RecursionError):
            raise
        except Exception as err:
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            shown = (brief(node.value) if isinstance(node, yaml.ScalarNode)
                     else "(a mapping)" if isinstance(node, yaml.MappingNode) else "(a list)")
            raise yaml.constructor.ConstructorError(
                None, None, f"{tag} {shown} cannot be read ({tag_problem(err)})",
                node.start_mark,
            ) from None

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._keys_checked: set[int] = set()
        self._open_anchors: set[str] = set()
        self._alias_values = 0
        self._alias_sizes: dict[int, int] = {}

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        """Refuse a key written twice in one mapping (YAML forbids it; PyYAML would keep the
        last silently), a ``<<`` merge's keys may still be overridden. Checked here, before
        PyYAML folds merged keys into the node, once per node (a merged node is reached again
        through its aliases)."""
        if id(node) not in self._keys_checked:
            self._keys_checked.add(id(node))
            first_line: dict[Any, int] = {}
            merges = 0
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    merges += 1
                    key: Any = ("<<",)
                else:
                    key = self.construct_object(key_node, deep=True)
                try:
                    earlier = first_line.get(key)
                except TypeError:  # an unhashable key: the constructor says so
                    continue
                if earlier is not None:
                    shown = (key_node.value if isinstance(key_node, yaml.ScalarNode)
                             else key)
                    raise yaml.constructor.ConstructorError(
                        None, None,
                        f"key {brief(shown, 64)} appears twice in one mapping (first on line "
                        f"{earlier + 1}; each key may appear once)",
                        key_node.start_mark,
                    )
                first_line[key] = key_node.start_mark.line
        super().flatten_mapping(node)


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML text (safe tags only); every failure is one UserInputError naming
    ``source`` (and the line where YAML knows it)."""
    try:
        return yaml.load(text, Loader=_SafeLoader)  # a SafeLoader: standard tags only
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise UserInputError(f"{where}: {problem}") from None
    except RecursionError:
        raise UserInputError(f"{source}: nested too deeply to read") from None


MAX_CONFIG_BYTES = 64 * 1024 * 1024
"""Largest YAML config read (a site's inline topology of 100k nodes is far below it)."""


def load_yaml_file(path: Path) -> Any:
    """Parse a YAML file, turning I/O and syntax errors into one-line UserInputErrors (a
    config is a regular file of at most MAX_CONFIG_BYTES: never a FIFO or /dev/zero)."""
    try:
        require_regular_file(path, "a YAML file", MAX_CONFIG_BYTES)
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserInputError(f"{path}: no such file") from None
    except UnicodeDecodeError as err:
        raise UserInputError(f"{path}: cannot read ({err.reason} at byte {err.start}; "
                             "expected UTF-8 text)") from None
    except OSError as err:
        raise UserInputError(f"{path}: cannot read ({err.strerror})") from None
    return parse_yaml(text, str(path))


def load_dataclass(cls: type[T], path: Path) -> T:
    """Load a YAML file into ``cls`` (see :func:`from_mapping`)."""
    return from_mapping(cls, load_yaml_file(path), str(path))
