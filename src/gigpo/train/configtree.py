"""A typed configuration tree of dataclasses, read from YAML plus dotted ``key=value`` overrides.

This module knows nothing of gigpo's sections (``gigpo.train.config`` declares them). A section is
a dataclass deriving from ``Section`` whose fields are made with ``F(default, help, ...)``; the
field declares its bounds or choices, and ``Section.__post_init__`` checks every field against
them before the section's own cross-key rules (``Section.check``) run. Every error is a
``ConfigError`` of one line: ``section.key: what is wrong; how to fix``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import textwrap
import typing
from dataclasses import field
from pathlib import Path
from typing import Any, ClassVar

import yaml

# A config file is a few KB; reading more than this is a wrong path (a device, a data file).
MAX_CONFIG_BYTES = 10 * 1024 * 1024
HELP_WIDTH = 100

# Upper bounds of counts: far above any real run, low enough that a typo (an extra 000) is refused
# at load instead of allocating until memory runs out.
MANY = 10**6  # tasks, episodes, rows
LONG = 10**7  # iterations, optimizer steps
TOKENS = 2**20  # tokens of one prompt or response (an LLM's context is far less)


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names the key and the fix."""


def F(  # noqa: N802 - the short name keeps field declarations readable
    default: Any,
    help: str,  # noqa: A002 - 'help' is the natural name here
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: typing.Iterable[str] | None = None,
    also: tuple = (),
    tags: tuple[str, ...] = (),
) -> Any:
    """A dataclass field with a one-line description (shown by ``--help`` and in the docs).

    ``ge``/``gt``/``le``/``lt``: bounds of a number; ``choices``: the allowed strings; ``also``:
    values allowed outside the bounds (``also=(-1,)`` for a "-1 = default" setting); ``tags``:
    free labels a section can look fields up by. ``None`` (an unset optional) is never checked.
    """
    meta: dict[str, Any] = {"help": help, "tags": tuple(tags)}
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)) if v is not None}
    if bounds:
        meta["bounds"] = bounds
    if choices is not None:
        meta["choices"] = tuple(choices)
    if also:
        meta["also"] = tuple(also)
    if isinstance(default, (dict, list)):
        kind, items = type(default), default
        return field(default_factory=lambda: kind(items), metadata=meta)
    return field(default=default, metadata=meta)


def check(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{key}: {msg}")


def choice(value: str, key: str, choices: typing.Sequence[str]) -> None:
    if value not in choices:
        close = difflib.get_close_matches(str(value), choices, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"{key}: {value!r} is not one of {list(choices)}.{hint}")


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def range_text(meta: typing.Mapping[str, Any]) -> str:
    """``[1, 1024]``, ``(0, 1]``, ``>= 0``, ``>= 0 or -1``: a field's declared range ('' = none)."""
    b = meta.get("bounds", {})
    lo = ("[", b["ge"]) if "ge" in b else ("(", b["gt"]) if "gt" in b else None
    hi = ("]", b["le"]) if "le" in b else (")", b["lt"]) if "lt" in b else None
    if lo and hi:
        text = f"{lo[0]}{_num(lo[1])}, {_num(hi[1])}{hi[0]}"
    elif lo:
        text = f"{'>=' if lo[0] == '[' else '>'} {_num(lo[1])}"
    elif hi:
        text = f"{'<=' if hi[0] == ']' else '<'} {_num(hi[1])}"
    else:
        return ""
    return text + "".join(f" or {a!r}" for a in meta.get("also", ()))


def bound_problem(value: float, meta: typing.Mapping[str, Any]) -> str | None:
    """What is wrong with ``value`` against the field's bounds (None = nothing). An int is told
    the side it crossed (``must be <= 1024``); a float the whole interval (``must be in (0, 1]``)."""
    b = meta.get("bounds")
    if not b or value in meta.get("also", ()):
        return None
    low_ok = value >= b.get("ge", -math.inf) and value > b.get("gt", -math.inf)
    high_ok = value <= b.get("le", math.inf) and value < b.get("lt", math.inf)
    if low_ok and high_ok:
        return None
    also = "".join(f" or {a!r}" for a in meta.get("also", ()))
    if isinstance(value, int):
        side = {k: v for k, v in b.items() if k in (("ge", "gt") if not low_ok else ("le", "lt"))}
        return f"must be {range_text({'bounds': side})}{also}, got {value}"
    text = range_text(meta)
    return f"must be {'in ' if text[0] in '[(' else ''}{text}, got {value}"


def check_fields(obj: Any, prefix: str) -> None:
    """Check every field of the dataclass ``obj`` against what its ``F`` declares; floats must be
    finite. ``prefix``: the section's dotted name ('' at the top), for the messages."""
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        key = f"{prefix}.{f.name}" if prefix else f.name
        if isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"{key}: must be a finite number, got {v}")
        if v is None or isinstance(v, bool):
            continue
        if "choices" in f.metadata:
            choice(v, key, f.metadata["choices"])
        if isinstance(v, (int, float)):
            problem = bound_problem(v, f.metadata)
            if problem:
                raise ConfigError(f"{key}: {problem}")


class Section:
    """Base of a config section (a dataclass): after ``__init__`` every field is checked against
    its declared bounds and choices, then ``check()``, the section's cross-key rules, runs."""

    PREFIX: ClassVar[str] = ""  # the dotted name of the section, '' for the root
    TITLE: ClassVar[str] = ""  # a few words for the --help header

    def __post_init__(self) -> None:
        check_fields(self, self.PREFIX)
        self.check()

    def check(self) -> None:
        """Cross-key rules of the section (override)."""


# --------------------------------------------------------------------------- (de)serialisation


def is_section(tp: Any) -> bool:
    return dataclasses.is_dataclass(tp)


def type_name(tp: Any) -> str:
    """``float``, or ``float or null`` for an optional field."""
    args = typing.get_args(tp)
    if type(None) in args:
        return " or ".join(a.__name__ for a in args if a is not type(None)) + " or null"
    return tp.__name__


def coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the field type ``tp``; ints are accepted for floats; ``X | None``
    fields take null."""
    args = typing.get_args(tp)
    if type(None) in args:
        if value is None or (isinstance(value, str) and value.lower() in ("null", "none", "~")):
            return None
        tp = next(a for a in args if a is not type(None))
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):  # YAML 1.1 reads "1e-6" as a string
        try:
            value = float(value)
        except ValueError:
            pass
    if tp is float and isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}: must be a finite number, got {value}")
    ok = isinstance(value, tp) and not (tp is int and isinstance(value, bool))
    if not ok:
        raise ConfigError(f"{key}: expected {tp.__name__}, got {type(value).__name__} {value!r}")
    return value


def from_dict(cls: Any, data: Any, prefix: str = "") -> Any:
    """Build the dataclass ``cls`` from a nested dict, rejecting unknown keys and wrong types."""
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if k not in names:
            close = difflib.get_close_matches(str(k), names, n=1)
            hint = f" Did you mean {prefix + close[0]!r}?" if close else f" Valid keys: {names}"
            raise ConfigError(f"unknown config key {key!r}.{hint}")
        tp = hints[k]
        kwargs[k] = from_dict(tp, v or {}, key + ".") if is_section(tp) else coerce(v, tp, key)
    return cls(**kwargs)


def to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)


def all_keys(cls: Any, prefix: str = "") -> typing.Iterator[tuple[str, Any, Any, str]]:
    """Yield ``(dotted_key, type, default, help)`` for every leaf field."""
    for key, tp, f in _leaves(cls, prefix):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        yield key, tp, default, f.metadata.get("help", "")


def _leaves(cls: Any, prefix: str = "") -> typing.Iterator[tuple[str, Any, dataclasses.Field]]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if is_section(tp):
            yield from _leaves(tp, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", tp, f


def apply_overrides(cls: Any, data: dict, overrides: list[str]) -> dict:
    """Set dotted ``key=value`` pairs (values parsed as YAML) into the nested dict ``data`` of the
    tree ``cls``; a key inside a ``dict`` field (``env.kwargs.foo``) is free-form."""
    leaves = {k: tp for k, tp, *_ in all_keys(cls)}
    free = tuple(f"{k}." for k, tp in leaves.items() if tp is dict)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value, e.g. train.lr=1e-5")
        key, raw = item.split("=", 1)
        key = key.strip()
        if key not in leaves and not key.startswith(free):
            close = difflib.get_close_matches(key, list(leaves), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown config key {key!r}.{hint}")
        value = yaml.safe_load(raw) if raw != "" else ""
        node = data
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{key}: {p!r} is not a section")
        node[parts[-1]] = value
    return data


# --------------------------------------------------------------------------- reading YAML


def _refuse_duplicate_keys(node, source: str, path: str = "") -> None:
    """A key written twice in one mapping is an error naming its dotted key and both lines (YAML
    keeps the last one, so a section written twice would silently lose the first)."""
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _refuse_duplicate_keys(item, source, path)
    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict = {}
    for key_node, value in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = f"{path}{key_node.value}" if isinstance(key_node, yaml.ScalarNode) else None
        if key is not None:
            line = key_node.start_mark.line + 1
            first = seen.setdefault(key, line)
            if first != line:
                raise ConfigError(
                    f"{key}: written twice in {source} (lines {first} and {line}); YAML would keep only the "
                    "last: merge them into one"
                )
        _refuse_duplicate_keys(value, source, f"{key}." if key is not None else path)


def read_yaml(path: str | Path) -> dict:
    """The mapping in the YAML file ``path`` ({} when empty); a missing, unreadable, binary or
    oversized file, or a key written twice, is a one-line ``ConfigError``."""
    p = Path(path)
    name = str(p)
    if not p.exists():
        raise ConfigError(f"config file {name!r} does not exist (see configs/*.yaml)")
    if p.is_dir():
        raise ConfigError(f"config file {name!r} is a directory; give a YAML file, e.g. configs/alfworld_tiny.yaml")
    try:
        with open(p, "rb") as f:  # not p.read_bytes(): a device such as /dev/zero never ends
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"config file {name!r} cannot be read ({e.strerror or e}); check the path") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"config file {name!r} is larger than {MAX_CONFIG_BYTES // 2**20} MB; a config is a small YAML file"
        )
    try:
        if b"\x00" in raw:
            raise UnicodeDecodeError("utf-8", raw, raw.index(b"\x00"), raw.index(b"\x00") + 1, "NUL byte")
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"config file {name!r} is not UTF-8 text (byte {e.start}: binary, or another encoding such as "
            "UTF-16); save it as UTF-8 YAML"
        ) from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return {}
        _refuse_duplicate_keys(node, name)
        data = loader.construct_document(node)
    finally:
        loader.dispose()
    return {} if data is None else data


# --------------------------------------------------------------------------- help


def sections(cls: Any, prefix: str = "") -> typing.Iterator[tuple[str, Any]]:
    """``(dotted name, section class)`` of ``cls`` and every section under it, in field order
    (the root's name is '')."""
    yield prefix.rstrip("."), cls
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if is_section(hints[f.name]):
            yield from sections(hints[f.name], f"{prefix}{f.name}.")


def key_help(key: str, tp: Any, f: dataclasses.Field, width: int = HELP_WIDTH) -> str:
    """``  key (type, default D, range R)`` and the description wrapped under it."""
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
    rng = range_text(f.metadata)
    head = f"  {key} ({type_name(tp)}, default {default!r}{', ' + rng if rng else ''})"
    body = textwrap.fill(
        f.metadata.get("help", ""), width, initial_indent=" " * 6, subsequent_indent=" " * 6, break_on_hyphens=False
    )
    return "\n".join([textwrap.fill(head, width, subsequent_indent=" " * 6), body])


def render_help(
    cls: Any,
    only: str | None = None,
    *,
    root_name: str = "top",
    after: typing.Mapping[str, str] | None = None,
    width: int = HELP_WIDTH,
) -> str:
    """Every key of the tree ``cls`` grouped by section, one header per section, wrapped to
    ``width``. ``only``: one section (and the sections under it); the root's keys are named
    ``root_name``. ``after``: text (already wrapped) shown after a section's keys."""
    names = section_names(cls, root_name)
    if only is not None and only not in names:
        close = difflib.get_close_matches(only, names, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"no config section {only!r}; sections: {', '.join(names)}.{hint}")
    out = []
    for name, sec in sections(cls):
        shown = name or root_name
        if only is not None and not (shown == only or shown.startswith(only + ".")):
            continue
        hints = typing.get_type_hints(sec)
        fields = [f for f in dataclasses.fields(sec) if not is_section(hints[f.name])]
        if not fields:
            continue
        title = getattr(sec, "TITLE", "")
        out.append(f"{shown}:" + (f" {title}" if title else ""))
        out.extend(key_help(f"{name}.{f.name}" if name else f.name, hints[f.name], f, width) for f in fields)
        if after and name in after:
            out.append(after[name])
        out.append("")
    return "\n".join(out).rstrip("\n")


def section_names(cls: Any, root_name: str = "top") -> list[str]:
    """The names ``render_help`` takes for ``only``."""
    return [name or root_name for name, _ in sections(cls)]
