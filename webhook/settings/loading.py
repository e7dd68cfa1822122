"""Loading the settings: defaults, overlaid by a YAML config file, overlaid by ``GPUSHARE_`` environment
variables; every error one ``ConfigFileError`` in plain words naming its source (the file, or the
variable that set the value)."""

import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from webhook.settings.sections import Settings

ENV_PREFIX = "GPUSHARE_"
ENV_NESTED_DELIMITER = "__"


class ConfigFileError(ValueError):
    """The config file cannot be read or does not fit the settings schema."""


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_settings(path: str | Path | None = None, known_rules: Collection[str] | None = None) -> Settings:
    """Defaults, overlaid by the YAML file at ``path`` (if any), overlaid by the environment.

    Errors are one ``ConfigFileError`` in plain words that names its source: the file, or the
    environment variable that set the value. With ``known_rules``, rule ids outside it are one too
    (the rules import this module, so the caller, not this module, knows them).
    """
    from pydantic import ValidationError

    from_file: dict[str, Any] = {}
    if path is not None:
        import yaml

        try:
            text = Path(path).read_text(encoding="utf-8")
            loaded = yaml.safe_load(text) or {}
        except OSError as exc:
            raise ConfigFileError(f"cannot read config {path}: {(exc.strerror or str(exc)).lower()}") from None
        except UnicodeDecodeError:
            raise ConfigFileError(f"cannot read config {path}: not UTF-8 text") from None
        except yaml.YAMLError as exc:
            raise ConfigFileError(_yaml_problem(path, exc)) from None
        if not isinstance(loaded, dict):
            raise ConfigFileError(f"{path}: config must be a mapping of sections (names, rules, server, ...), "
                                  f"not {_kind(loaded)}")
        from_file = _rule_ids_upper(loaded)
    from_environment = _from_environment()
    merged = _deep_merge(from_file, from_environment)
    # Every mistake at once: the schema's and the unknown rule ids.
    mistakes = _unknown_rule_ids(merged, set(known_rules), path, from_environment) if known_rules is not None else []
    if not merged and not mistakes:
        return Settings.model_construct()  # the defaults, valid by construction (see module docstring)
    try:
        settings = Settings(**merged)
    except ValidationError as exc:
        mistakes.insert(0, plain_errors(exc, lambda loc: _source_of(loc, path, from_environment)))
    if mistakes:
        raise ConfigFileError("; ".join(mistakes))
    return settings


def _yaml_problem(path: str | Path, exc: Any) -> str:
    """PyYAML's complaint at its line of the file, without its ``in "<unicode string>"`` marks."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or "not YAML"
    return f"cannot read config {where}: invalid YAML: {problem}"


def _kind(value: object) -> str:
    return {dict: "a mapping", list: "a list", str: "text", bool: "true/false", int: "a number",
            float: "a number", type(None): "empty"}.get(type(value), type(value).__name__)


def _rule_ids_upper(data: dict[str, Any]) -> dict[str, Any]:
    """Rule ids are upper case (GS003); the environment hands them over lower case."""
    rules = data.get("rules")
    if isinstance(rules, dict):
        return {**data, "rules": {str(key).upper(): value for key, value in rules.items()}}
    return data


def _env_name(loc: tuple[Any, ...]) -> str:
    return ENV_PREFIX + ENV_NESTED_DELIMITER.join(str(part).upper() for part in loc)


def _env_value(loc: tuple[Any, ...], environment: dict[str, Any]) -> tuple[bool, Any]:
    """Whether the environment sets ``loc``, and to what."""
    node: Any = environment
    for part in loc:
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _source_of(loc: tuple[Any, ...], path: str | Path | None, environment: dict[str, Any]) -> str:
    for end in range(len(loc), 0, -1):
        sets, value = _env_value(loc[:end], environment)
        # The variable set this very value, or a value the mistake is inside (a whole section
        # as JSON that is not a mapping); a section the environment sets other keys of is the
        # file's (GPUSHARE_SERVER__WORKER says nothing about server.port).
        if sets and (end == len(loc) or not isinstance(value, dict)):
            return f"environment variable {_env_name(loc[:end])}"
    return str(path) if path is not None else "settings"


def _unknown_rule_ids(merged: dict[str, Any], known: set[str], path: str | Path | None,
                      environment: dict[str, Any]) -> list[str]:
    rules = merged.get("rules")
    unknown = sorted(str(k) for k in rules if str(k) not in known) if isinstance(rules, dict) else []
    if not unknown:
        return []
    import difflib

    source = _source_of(("rules", unknown[0]), path, environment)
    guesses = [f"{rule_id} (did you mean {guess[0]}?)" if guess else rule_id
               for rule_id in unknown for guess in [difflib.get_close_matches(rule_id, sorted(known), n=1)]]
    return [f"{source}: names unknown rules: {', '.join(guesses)} (`gpushare rules` lists every rule id)"]


def _did_you_mean(loc: tuple[Any, ...]) -> str:
    """For an unknown setting, the closest setting of its section: " (did you mean threads?)"."""
    import difflib

    model: Any = Settings
    for part in loc[:-1]:
        field = getattr(model, "model_fields", {}).get(part)
        model = getattr(field, "annotation", None) if field is not None else None
        if not isinstance(model, type) or not hasattr(model, "model_fields"):
            return ""
    guess = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1, cutoff=0.6)
    return f" (did you mean {guess[0]}?)" if guess else ""


_PLAIN = {
    "int_parsing": "is not a whole number", "int_type": "is not a whole number",
    "int_from_float": "is not a whole number", "float_parsing": "is not a number", "float_type": "is not a number",
    "bool_parsing": "is not true or false", "bool_type": "is not true or false",
    "string_type": "is not text", "dict_type": "is not a mapping", "model_type": "is not a mapping",
    "list_type": "is not a list", "tuple_type": "is not a list", "missing": "is missing",
    "extra_forbidden": "is not a setting", "path_type": "is not a file path",
}


def plain_errors(exc: Any, source: Any) -> str:
    """pydantic's validation errors as one line of plain words, each with where it came from."""
    parts = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        where = ".".join(str(p) for p in loc) or "config"
        value = error.get("input")
        kind, ctx = error["type"], error.get("ctx") or {}
        shown = _show(value)
        if kind == "extra_forbidden":
            text = f"{where}: unknown setting{_did_you_mean(loc)}"
        elif kind == "literal_error":
            text = f"{where}: {shown} is not one of {ctx.get('expected', '')}"
        elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
            bound = {"greater_than_equal": ("at least", "ge"), "greater_than": ("more than", "gt"),
                     "less_than_equal": ("at most", "le"), "less_than": ("less than", "lt")}[kind]
            text = f"{where}: {shown} must be {bound[0]} {ctx.get(bound[1])}"
        elif kind == "missing":
            text = f"{where}: is missing"
        elif kind in _PLAIN:
            text = f"{where}: {shown} {_PLAIN[kind]}"
        else:
            text = f"{where}: {shown}: {error['msg'][:1].lower()}{error['msg'][1:]}"
        parts.append(f"{source(loc)}: {text}")
    return "; ".join(parts)


def _show(value: object) -> str:
    import json

    try:
        return json.dumps(value, default=str)[:80]
    except (TypeError, ValueError):
        return repr(value)[:80]


def _from_environment() -> dict[str, Any]:
    """The settings given as GPUSHARE_* variables (``__`` between nested keys), as a nested dict."""
    if not any(name.upper().startswith(ENV_PREFIX) for name in os.environ):
        return {}
    from pydantic import ValidationError, create_model
    from pydantic_settings import BaseSettings, SettingsConfigDict

    class FromEnvironment(BaseSettings):
        model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_NESTED_DELIMITER,
                                          extra="forbid")

    fields: dict[str, Any] = {name: (info.annotation, info) for name, info in Settings.model_fields.items()}
    reader = create_model("SettingsFromEnvironment", __base__=FromEnvironment, **fields)
    try:
        values = reader().model_dump(exclude_unset=True)
    except ValidationError as exc:
        raise ConfigFileError(plain_errors(exc, lambda loc: f"environment variable {_env_name(loc)}")) from None
    return _rule_ids_upper(values)
