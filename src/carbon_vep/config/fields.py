"""How a setting is declared, read and described; the settings are in `stages` and `run`.

A setting is a field of a frozen dataclass made with `setting(...)`: its annotation gives the
type (a `Literal` gives the choices), its default is the one default, and its metadata gives
the help text, CLI flag, bounds and `scope` (where its config key lives: `entry` = in the
config entry, `run` = once at the top level, `run_default` = at the top level as every entry's
default and in an entry for that entry alone, `cli` = a command-line option only). A field made with
`group(Cls)` nests another settings class whose keys sit flat in the same YAML entry.

From these declarations this module reads settings from flat mappings (YAML entries, a rule's
`--settings` JSON, command-line options), writes them back (`to_flat`, `spec_json`), adds the
command-line options (`add_flags` / `from_args`) and writes JSON-schema properties
(`entry_schema`). No torch here.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import math
import os
import re
import shlex
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import MISSING, field, fields
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

Scope = Literal["entry", "run", "run_default", "cli"]


class ConfigError(ValueError):
    """A config (or a command line) that cannot mean what it says."""


def setting(
    default: Any = MISSING,
    *,
    help: str,
    flag: str | None = None,
    scope: Scope = "entry",
    cli: bool = True,
    choices: tuple[Any, ...] | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    pattern: str | None = None,
    item_pattern: str | None = None,
    value_choices: tuple[Any, ...] | None = None,
    single: bool = False,
) -> Any:
    """A dataclass field carrying what the schema and the CLI need to know about a setting."""
    metadata = {
        "help": help,
        "flag": flag,
        "scope": scope,
        "cli": cli,
        "choices": choices,
        "minimum": minimum,
        "maximum": maximum,
        "pattern": pattern,
        "item_pattern": item_pattern,
        "value_choices": value_choices,
        "single": single,  # a list setting that also takes one bare string (`regions: all`)
    }
    if isinstance(default, dict | list):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def group(cls: type) -> Any:
    """A nested settings group: its fields are keys of the enclosing entry (flat in YAML)."""
    return field(default_factory=cls, metadata={"group": True})


def did_you_mean(key: str, allowed: Iterable[str]) -> str:
    """ "; did you mean `KEY`?" with the allowed key spelled closest to a mistyped `key`
    (difflib), or "" when none is close: what every refusal of an unknown key suggests (a
    config file's, `--settings`')."""
    close = difflib.get_close_matches(key, list(allowed), n=1)
    return f"; did you mean `{close[0]}`?" if close else ""


# ---- introspection -----------------------------------------------------------------------
def _is_group(f: dataclasses.Field) -> bool:
    return bool(f.metadata.get("group"))


def flat_fields(cls: type) -> Iterator[tuple[dataclasses.Field, Any]]:
    """Every setting of `cls` and of its nested groups, with its (resolved) annotation."""
    hints = get_type_hints(cls)
    for f in fields(cls):
        if _is_group(f):
            yield from flat_fields(hints[f.name])
        else:
            yield f, hints[f.name]


def is_required(f: dataclasses.Field) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def default_of(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default


def field_named(settings: Any, name: str) -> dataclasses.Field:
    """The field `name` of a settings class or instance (what `describe` names)."""
    return next(f for f in dataclasses.fields(settings) if f.name == name)


def _type_info(hint: Any) -> tuple[str, str | None, bool]:
    """(kind, item or value kind, nullable): kinds are str, int, float, bool, list, map."""
    nullable = False
    if get_origin(hint) in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        nullable, hint = True, args[0]
    origin = get_origin(hint)
    if origin is Literal:
        return _scalar(type(get_args(hint)[0])), None, nullable
    if origin is tuple:
        return "list", _type_info(get_args(hint)[0])[0], nullable
    if origin is dict:
        return "map", _type_info(get_args(hint)[1])[0], nullable
    return _scalar(hint), None, nullable


def takes_list(hint: Any) -> bool:
    """Whether a setting of this annotation holds a list (`models`, `regions`, ...)."""
    return _type_info(hint)[0] == "list"


def _scalar(tp: Any) -> str:
    return {str: "str", int: "int", float: "float", bool: "bool"}[tp]


def choices_of(f: dataclasses.Field, hint: Any) -> tuple[Any, ...] | None:
    if f.metadata.get("choices"):
        return tuple(f.metadata["choices"])
    bare = [a for a in get_args(hint) if a is not type(None)] if get_origin(hint) else [hint]
    literal = next((a for a in bare if get_origin(a) is Literal), hint)
    return get_args(literal) if get_origin(literal) is Literal else None


# ---- reading and writing flat mappings -------------------------------------------------------
def from_flat(
    cls: type,
    values: Mapping[str, Any],
    where: str,
    ignore: Iterable[str] = (),
    origins: Mapping[str, str] | None = None,
) -> Any:
    """`cls` from a flat mapping of its settings (nested groups read the same mapping).

    Missing keys take the dataclass default; keys in `ignore` (the run-level settings, present
    for every entry) are skipped where `cls` has no such setting; any other unknown key is an
    error naming it. Every value is checked as the schema checks it (type, choices, bounds,
    pattern), wherever it was read: an error names the setting and `where` (or, from
    `origins`, where that key came from).
    """
    own = {f.name for f, _ in flat_fields(cls)}
    unknown = sorted(set(values) - own - set(ignore))
    if unknown:
        hints = "; ".join(f"{key!r}{did_you_mean(key, own)}" for key in unknown)
        raise ConfigError(f"{where}: unknown setting(s) {hints}")
    return _build(cls, values, where, origins or {})


def _build(cls: type, values: Mapping[str, Any], where: str, origins: Mapping[str, str]) -> Any:
    hints = get_type_hints(cls)
    kwargs = {}
    for f in fields(cls):
        if _is_group(f):
            kwargs[f.name] = _build(hints[f.name], values, where, origins)
        elif f.name in values:
            kwargs[f.name] = _coerce(values[f.name], hints[f.name], f, origins.get(f.name, where))
        elif is_required(f):
            raise ConfigError(f"{where}: {describe(f)} is required")
    try:
        return cls(**kwargs)
    except ConfigError as err:  # a combination of settings its class refuses (__post_init__)
        raise ConfigError(f"{where}: {err}") from err


def _coerce(value: Any, hint: Any, f: dataclasses.Field, where: str) -> Any:
    """Lists become tuples, mappings dicts; every value is checked against the declaration
    (type, choices, bounds, pattern: what the schema checks in a config file)."""
    if value is None:
        return None
    kind, inner, _ = _type_info(hint)
    meta = f.metadata

    def refuse(problem: str) -> ConfigError:
        return ConfigError(f"{where}: {describe(f)} is {value!r}; {problem}")

    if kind == "list":
        if isinstance(value, str) and meta.get("single"):
            value = (value,)
        elif not isinstance(value, list | tuple):
            raise refuse(f"expected a list of {inner} values")
        value = tuple(_scalar_value(v, inner, refuse) for v in value)  # item_pattern: the
        # class that declares one names the bad item better (NiahSettings: unknown task(s))
    elif kind == "map":
        if not isinstance(value, Mapping):
            raise refuse(f"expected a mapping of KEY to {inner} values")
        value = {str(k): _scalar_value(v, inner, refuse) for k, v in value.items()}
        allowed = meta["value_choices"]
        bad = [v for v in value.values() if allowed and v not in allowed]
        if bad:
            raise refuse(f"its values must be one of {list(allowed)}, not {bad[0]!r}")
    else:
        value = _scalar_value(value, kind, refuse)
        if meta["minimum"] is not None and value < meta["minimum"]:
            raise refuse(f"the minimum is {meta['minimum']}")
        if meta["maximum"] is not None and value > meta["maximum"]:
            raise refuse(f"the maximum is {meta['maximum']}")
        if meta["pattern"] is not None and not re.search(meta["pattern"], value):
            raise refuse(f"it must match {meta['pattern']}")
    choices = choices_of(f, hint)
    if choices and value not in choices:
        raise refuse(f"choose one of {list(choices)}")
    return value


def _scalar_value(value: Any, kind: str | None, refuse: Callable[[str], ConfigError]) -> Any:
    """`value` as a setting of `kind` (str, int, float, bool), or an error saying what is
    expected: no strings for numbers, no booleans for numbers, no NaN or infinity; a whole
    float (6.0) is an int, an int a float."""
    if kind == "bool":
        if isinstance(value, bool):
            return value
        raise refuse("expected true or false")
    if kind == "str":
        if isinstance(value, str):
            return value
        raise refuse("expected a string")
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number:
        raise refuse(f"expected {'an integer' if kind == 'int' else 'a number'}")
    if not math.isfinite(value):
        raise refuse("expected a finite number")
    if kind == "int":
        if isinstance(value, float) and not value.is_integer():
            raise refuse("expected an integer")
        return int(value)
    return float(value)


def to_flat(settings: Any) -> dict[str, Any]:
    """A settings object and its nested groups as one flat, JSON-ready mapping."""
    out: dict[str, Any] = {}
    for f in fields(settings):
        value = getattr(settings, f.name)
        if _is_group(f):
            out.update(to_flat(value))
        else:
            out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def spec_json(*settings: Any, exclude: Iterable[str] = ()) -> str:
    """Settings objects as one shell-quoted JSON object: a rule's `--settings` argument
    (`exclude`: settings the rule passes otherwise, e.g. a batch size that is a resource)."""
    merged: dict[str, Any] = {}
    for item in settings:
        merged.update(to_flat(item))
    for name in exclude:
        merged.pop(name)
    return shlex.quote(json.dumps(merged, sort_keys=True))


# ---- naming a setting to the user in front of us ---------------------------------------------
INTERFACE_VARIABLE = "CARBON_VEP_INTERFACE"  # the workflow's rules set it to `workflow`


def flag_name(f: dataclasses.Field) -> str:
    return "--" + (f.metadata.get("flag") or f.name.replace("_", "-"))


def describe(f: dataclasses.Field, value: str | None = None, hint: Any = str) -> str:
    """A setting as its flag on the command line, as its config key under the workflow.

    With `value` (`KEY=VALUE` for a mapping, one item for a list, true or false for a switch;
    `hint` is the setting's annotation) it is shown set to it: "`--column pos=POS_hg38`" or
    "`--trust-remote-code`" on the command line, "the config key `columns` (`columns: {pos:
    POS_hg38}`)" under the workflow.
    """
    kind = _type_info(hint)[0]
    if os.environ.get(INTERFACE_VARIABLE) != "workflow":
        if value is None:
            return f"`{flag_name(f)}`"
        if kind == "bool":  # a switch takes no value: --flag, or --no-flag
            on = value.lower() == "true"
            return f"`{flag_name(f) if on else flag_name(f).replace('--', '--no-', 1)}`"
        return f"`{flag_name(f)} {value}`"
    where = "top-level config key" if f.metadata.get("scope") == "run" else "config key"
    name = f"the {where} `{f.name}`"
    if value is None:
        return name
    if kind == "map":
        entry, _, mapped = value.partition("=")
        value = f"{{{entry}: {mapped}}}"
    elif kind == "list":
        value = f"[{value}]"
    return f"{name} (`{f.name}: {value}`)"


# ---- the command line ----------------------------------------------------------------------
_PY = {"str": str, "int": int, "float": float, "bool": bool}


class _KeyValues(argparse.Action):
    """Repeated KEY=VALUE options into a dict (values typed as the setting's map values)."""

    value_type: Any = str

    def __call__(self, parser, namespace, values, option_string=None):
        current = dict(getattr(namespace, self.dest, None) or {})
        key, sep, value = str(values).partition("=")
        if not sep:
            parser.error(f"{option_string} expects KEY=VALUE, got {values!r}")
        try:
            current[key] = type(self).value_type(value)
        except ValueError:
            kind = type(self).value_type.__name__
            parser.error(f"argument {option_string}: {key}={value!r}: the value is not {kind}")
        setattr(namespace, self.dest, current)


def add_flags(parser: argparse.ArgumentParser, *classes: type) -> None:
    """One option per setting of `classes` (and their groups), plus `--settings` (JSON)."""
    parser.add_argument(
        "--settings",
        default=None,
        help="the settings as one JSON object (what the workflow's rules pass); options given "
        "on the command line override its values",
    )
    for cls in classes:
        for f, hint in flat_fields(cls):
            if f.metadata["cli"]:
                parser.add_argument(
                    flag_name(f),
                    dest=f.name,
                    default=argparse.SUPPRESS,
                    help=_help(f),
                    **_argparse_kind(f, hint),
                )


def _help(f: dataclasses.Field) -> str:
    text = f.metadata["help"].replace("%", "%%")
    return f"{text} (required)" if is_required(f) else f"{text} (default: {default_of(f)})"


def _argparse_kind(f: dataclasses.Field, hint: Any) -> dict[str, Any]:
    kind, inner, _ = _type_info(hint)
    if kind == "bool":
        return {"action": argparse.BooleanOptionalAction}
    if kind == "list":
        return {"action": "extend", "nargs": "+", "type": _PY[inner]}
    if kind == "map":
        action = type("KeyValues", (_KeyValues,), {"value_type": staticmethod(_PY[inner])})
        return {"action": action, "metavar": "KEY=VALUE"}
    choices = choices_of(f, hint)
    return {"type": _PY[kind], **({"choices": list(choices)} if choices else {})}


def from_args(args: argparse.Namespace, *classes: type) -> tuple[Any, ...]:
    """Each of `classes` from `--settings` overlaid with the options given on the command line.
    Every value is checked as a config file's is (type, choices, bounds): an error names the
    option, or the `--settings` key, and the problem."""
    values = _settings_json(getattr(args, "settings", None))
    own = {f.name for cls in classes for f, _ in flat_fields(cls)}
    origins = {name: f"--settings key {name!r}" for name in values}
    unknown = sorted(set(values) - own)
    if unknown:
        problems = [
            f"{origins[key]}: not a setting of this command{did_you_mean(key, own)}"
            for key in unknown
        ]
        raise ConfigError("; ".join(problems))
    given = {name: value for name, value in vars(args).items() if name in own}
    values.update(given)
    for name in given:
        origins.pop(name, None)
    return tuple(
        from_flat(
            cls,
            values,
            "command line",
            ignore=own - {f.name for f, _ in flat_fields(cls)},
            origins=origins,
        )
        for cls in classes
    )


def _settings_json(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        values = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"--settings is not valid JSON: {err}") from err
    if not isinstance(values, dict):
        raise ConfigError(f"--settings must be a JSON object, got {type(values).__name__}")
    return values


# ---- JSON schema -----------------------------------------------------------------------------
_JSON = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


def schema_property(
    f: dataclasses.Field, hint: Any, sweep: bool = False, default: bool = True
) -> dict[str, Any]:
    """The JSON-schema property of one setting: type, bounds, choices, default, description.
    A `sweep` setting also takes a list of values (RunConfig checks them, naming the entry).
    Without `default` the schema fills none in (an entry's `run_default` setting: the
    validator would otherwise set it in every entry, hiding the top-level value)."""
    kind, inner, nullable = _type_info(hint)
    meta = f.metadata
    if kind == "list":
        items: dict[str, Any] = {"type": _JSON[inner]}
        if meta["item_pattern"]:
            items["pattern"] = meta["item_pattern"]
        prop: dict[str, Any] = {"type": "array", "items": items}
        if is_required(f):
            prop["minItems"] = 1
        if meta.get("single"):
            prop = {"anyOf": [prop, {"type": _JSON[inner]}]}
    elif kind == "map":
        value: dict[str, Any] = {"type": _JSON[inner]}
        if meta["value_choices"]:
            value["enum"] = list(meta["value_choices"])
        prop = {"type": "object", "additionalProperties": value}
    else:
        prop = {"type": _JSON[kind]}
    if nullable:
        prop["type"] = [prop["type"], "null"]
    choices = choices_of(f, hint)
    if choices:
        prop["enum"] = list(choices)
    for key in ("minimum", "maximum", "pattern"):
        if meta[key] is not None:
            prop[key] = meta[key]
    if sweep:
        prop = {"anyOf": [prop, {"type": "array", "items": {"type": prop["type"]}}]}
    if default and not is_required(f):
        value = default_of(f)
        prop["default"] = list(value) if isinstance(value, tuple) else value
    prop["description"] = meta["help"] + (SWEEP_HELP if sweep else "")
    return prop


SWEEP_HELP = (
    "; a list sweeps it: the first value is the entry's own, each other value a job of its own "
    "(docs/metrics.md#sweeps)"
)


ENTRY_SCOPES = ("entry", "run_default")  # the scopes a config entry may set
RUN_SCOPES = ("run", "run_default")  # the scopes the top level may set


def entry_schema(cls: type, sweeps: Iterable[str] = ()) -> dict[str, Any]:
    """The schema of one config entry: its entry-scope settings, flat (`sweeps`: the settings
    that also take a list)."""
    settings = [(f, h) for f, h in flat_fields(cls) if f.metadata["scope"] in ENTRY_SCOPES]
    swept = set(sweeps)
    return {
        "type": "object",
        "properties": {
            f.name: schema_property(f, h, f.name in swept, f.metadata["scope"] == "entry")
            for f, h in settings
        },
        "required": [f.name for f, _ in settings if is_required(f)],
        "additionalProperties": False,
    }
