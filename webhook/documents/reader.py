"""One reader for documents that arrive as text: the ``/dry-run`` body, ``gpushare check`` files
and cluster snapshots. Whatever the text, reading it cannot crash the process, recurse without
bound or expand without bound.

YAML is read in two passes over libyaml. The first streams parser *events* (the parser keeps
its own stack on the heap, never recursing) and refuses, at the first event past a bound:
nesting deeper than ``max_depth`` (counted through aliases), aliases that would add more than
``max_alias_bytes`` to the document, a recursive alias, and a key repeated in one mapping.
Only a text that passed is composed: PyYAML's C composer recurses once per nesting level and
overflowed the C stack at about 25,000 levels (SIGSEGV), and its scanner spends time
quadratic in the nesting depth, so the composer must never see deep input. The second pass
also refuses values JSON cannot carry (NaN, infinities, integers over 4300 digits).

JSON is decoded strictly (``strict_json``: no duplicate keys, no NaN, no lone surrogate)
and its depth checked before anything copies or walks it recursively.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor

from webhook.settings import InputSettings

# The event pass needs only a parser; libyaml's when PyYAML was built with it.
_EventSource: Any = yaml.SafeLoader
if yaml.__with_libyaml__:
    from yaml._yaml import CParser as _EventSource
_CLoaderBase = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# libyaml refuses collections nested past its own limit (1,000 by default since its patch "Limit
# depth of nesting by default", bundled with PyYAML 6.0.4) and may scan that far ahead before it
# yields the event this pass counts; past 1,000 is past every allowed input.max_depth, so it is
# the same refusal and says so in the same words.
_LIBYAML_TOO_DEEP = "exceeded maximum nesting depth"
# The defaults, valid by construction: no validator is built for them (webhook.settings says why).
DEFAULT_LIMITS = InputSettings.model_construct()


class DocumentError(ValueError):
    """Text that cannot be read as documents; names the source and, where known, the line."""

    def __init__(self, source: str, line: int | None, message: str) -> None:
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {message}")
        self.source, self.line, self.reason = source, line, message


class TooManyDocuments(DocumentError):
    """More documents (or objects) than the reader was asked to take: found before reading them."""

    def __init__(self, source: str, line: int | None, limit: int) -> None:
        super().__init__(source, line, f"more than {limit} objects")
        self.limit = limit


# -- pass 1: events


class _Open:
    """A collection whose end event has not come yet."""

    __slots__ = ("anchor", "expect_key", "height", "keys", "line", "size")

    def __init__(self, anchor: str | None, mapping: bool, line: int) -> None:
        self.anchor, self.line = anchor, line
        self.size = 2  # its brackets
        self.height = 1
        self.keys: set[str] | None = set() if mapping else None
        self.expect_key = mapping


_SCALAR, _ALIAS = yaml.ScalarEvent, yaml.AliasEvent
_STARTS = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_ENDS = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def check_yaml(text: str, source: str, limits: InputSettings = DEFAULT_LIMITS,
               max_documents: int | None = None) -> None:
    """Stream ``text``'s YAML events and raise DocumentError at the first one past a bound
    (TooManyDocuments past ``max_documents`` documents).

    Sizes are counted as the document would be written out with every alias expanded: a
    scalar's length plus 2, a collection's 2 plus its items. Syntax errors are left to the
    second pass, which words them with their line.
    """
    parser = _EventSource(text)
    stack: list[_Open] = []
    anchors: dict[str, tuple[int, int]] = {}  # name -> (expanded size, height)
    alias_bytes = 0
    documents = 0
    max_depth, budget = limits.max_depth, limits.max_alias_bytes
    try:
        while True:
            try:
                event = parser.get_event()
            except yaml.YAMLError as exc:
                if getattr(exc, "problem", None) == _LIBYAML_TOO_DEEP:
                    mark = getattr(exc, "problem_mark", None)
                    line = mark.line + 1 if mark is not None else None
                    raise DocumentError(source, line, f"nested deeper than {max_depth} levels; refused") from None
                return  # the composing pass reports it, with its line
            if event is None:
                return
            kind = type(event)
            if kind is _SCALAR or kind is _ALIAS or isinstance(event, _STARTS):
                top = stack[-1] if stack else None
                if top is not None and top.keys is not None:
                    if top.expect_key and kind is _SCALAR:
                        key = event.value
                        if key in top.keys and key != "<<":
                            raise DocumentError(source, event.start_mark.line + 1,
                                                f"duplicate key {key[:80]!r} in a mapping; each key may appear once")
                        top.keys.add(key)
                    top.expect_key = not top.expect_key
                if kind is _SCALAR:
                    size, height = len(event.value) + 2, 0
                elif kind is _ALIAS:
                    if any(o.anchor == event.anchor for o in stack):
                        raise DocumentError(source, event.start_mark.line + 1,
                                            f"alias *{event.anchor} refers to a collection that contains it; refused")
                    found = anchors.get(event.anchor)
                    if found is None:
                        continue  # undefined: the composer says so
                    size, height = found
                    alias_bytes += size
                    if alias_bytes > budget:
                        raise DocumentError(source, event.start_mark.line + 1,
                                            f"YAML aliases expand the input by more than {budget} bytes; refused")
                    if len(stack) + height > max_depth:
                        raise DocumentError(source, event.start_mark.line + 1,
                                            f"alias *{event.anchor} nests the document deeper than "
                                            f"{max_depth} levels; refused")
                else:
                    stack.append(_Open(event.anchor, isinstance(event, yaml.MappingStartEvent),
                                       event.start_mark.line + 1))
                    if len(stack) > max_depth:
                        raise DocumentError(source, event.start_mark.line + 1,
                                            f"nested deeper than {max_depth} levels; refused")
                    continue
                if kind is _SCALAR and event.anchor:
                    anchors[event.anchor] = (size, 0)
                if stack:
                    stack[-1].size += size
                    stack[-1].height = max(stack[-1].height, height + 1)
            elif isinstance(event, _ENDS):
                closed = stack.pop()
                if closed.anchor:
                    anchors[closed.anchor] = (closed.size, closed.height)
                if stack:
                    stack[-1].size += closed.size
                    stack[-1].height = max(stack[-1].height, closed.height + 1)
            elif isinstance(event, yaml.DocumentStartEvent):
                anchors.clear()  # anchors are scoped to their document
                documents += 1
                if max_documents is not None and documents > max_documents:
                    mark = event.start_mark
                    raise TooManyDocuments(source, mark.line + 1 if mark is not None else None, max_documents)
    finally:
        parser.dispose()


# -- pass 2: composing and constructing


class _JsonableConstructor(SafeConstructor):
    """SafeConstructor for values that JSON can carry, as Kubernetes reads YAML: numbers finite
    and of sane length, timestamps kept as the text written, mapping keys as strings."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> Any:
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # more than sys.get_int_max_str_digits() digits
            raise ConstructorError(None, None, f"an integer of {len(str(node.value))} characters; at most "
                                               f"{sys.get_int_max_str_digits()} digits are read",
                                   node.start_mark) from None

    def construct_yaml_float(self, node: yaml.ScalarNode) -> Any:
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise ConstructorError(None, None, f"{node.value!r} is not a finite number; JSON has no NaN or "
                                               f"Infinity", node.start_mark)
        return value

    def construct_yaml_timestamp(self, node: yaml.ScalarNode) -> Any:
        # JSON has no time type: Kubernetes objects carry times as strings.
        return self.construct_scalar(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        mapping = super().construct_mapping(node, deep=deep)
        if all(type(key) is str for key in mapping):
            return mapping
        return {_key_text(key): value for key, value in mapping.items()}


def _key_text(key: Any) -> str:
    """A non-string mapping key as JSON spells the scalar (``1``, ``true``, ``null``)."""
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, (int, float, str)):
        return str(key)
    raise ConstructorError(None, None, f"a mapping key must be a scalar, got {type(key).__name__}", None)


for _tag, _name in (("int", "construct_yaml_int"), ("float", "construct_yaml_float"),
                    ("timestamp", "construct_yaml_timestamp")):
    _JsonableConstructor.add_constructor(f"tag:yaml.org,2002:{_tag}", getattr(_JsonableConstructor, _name))


class GuardedLoader(_CLoaderBase, _JsonableConstructor):  # type: ignore[misc,valid-type]
    """libyaml's parser and composer with the JSON-able constructor; only for text that passed
    ``check_yaml``."""

    def __init__(self, stream: str) -> None:
        _CLoaderBase.__init__(self, stream)
        _JsonableConstructor.__init__(self)


def _check_nodes(node: yaml.Node, source: str, max_depth: int) -> None:
    """The event pass's depth and duplicate-key bounds, on a composed document without aliases."""
    stack: list[tuple[yaml.Node, int]] = [(node, 1)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, yaml.ScalarNode):
            continue
        if depth > max_depth:
            raise DocumentError(source, current.start_mark.line + 1, f"nested deeper than {max_depth} levels; refused")
        if isinstance(current, yaml.MappingNode):
            keys: set[str] = set()
            for key, _value in current.value:
                if isinstance(key, yaml.ScalarNode) and key.value != "<<":
                    if key.value in keys:
                        raise DocumentError(source, key.start_mark.line + 1, f"duplicate key {key.value[:80]!r} in a "
                                                                             "mapping; each key may appear once")
                    keys.add(key.value)
            children = [child for pair in current.value for child in pair]
        else:
            children = current.value
        stack.extend((child, depth + 1) for child in reversed(children))


def yaml_nodes(text: str, source: str, limits: InputSettings = DEFAULT_LIMITS, *, own_files: bool = False,
               max_documents: int | None = None) -> Iterator[tuple[yaml.Node, GuardedLoader]]:
    """Each non-empty document's node graph, with the loader that constructs it; DocumentError for
    anything unreadable or past a bound (construct with ``construct``).

    ``own_files``: the user's own files (``gpushare check``), not a body from the network. Their
    text without an anchor (``&``) cannot expand through aliases: libyaml composes it (it refuses
    nesting past 1,000 itself, so its composer cannot run deep) and the composed nodes are held to
    the same depth and duplicate-key bounds, skipping the event pass that costs a quarter of
    reading a file (bench/check.py). What that gives up is the event pass's early stop: nesting
    between ``max_depth`` and 1,000 levels is scanned (quadratic in depth, seconds at worst) before
    it is refused, a cost a server must not take from a client but a CI job can."""
    fast = own_files and yaml.__with_libyaml__ and "&" not in text
    if not fast:
        check_yaml(text, source, limits, max_documents)
    loader = GuardedLoader(text)
    try:
        while True:
            try:
                if not loader.check_node():
                    return
                node = loader.get_node()
            except yaml.YAMLError as exc:
                if getattr(exc, "problem", None) == _LIBYAML_TOO_DEEP:
                    mark = getattr(exc, "problem_mark", None)
                    raise DocumentError(source, mark.line + 1 if mark is not None else None,
                                        f"nested deeper than {limits.max_depth} levels; refused") from None
                raise yaml_error(exc, text, source) from None
            if node is not None:
                if fast:
                    _check_nodes(node, source, limits.max_depth)
                yield node, loader
    finally:
        loader.dispose()


def construct(loader: GuardedLoader, node: yaml.Node, text: str, source: str) -> Any:
    """The Python value of one composed document."""
    try:
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise yaml_error(exc, text, source) from None
    except (ValueError, TypeError, OverflowError) as exc:  # a constructor's own complaint
        raise DocumentError(source, node.start_mark.line + 1, f"invalid YAML value: {exc}") from None


def read_yaml(text: str, source: str, limits: InputSettings = DEFAULT_LIMITS) -> list[Any]:
    """Every non-empty document of ``text`` as Python values."""
    out = []
    for node, loader in yaml_nodes(text, source, limits):
        value = construct(loader, node, text, source)
        if value is not None:
            out.append(value)
    return out


def yaml_error(exc: yaml.YAMLError, text: str, source: str) -> DocumentError:
    """The parser's complaint at its line; a construct left open names the line it opened on."""
    problem_mark = getattr(exc, "problem_mark", None)
    context_mark = getattr(exc, "context_mark", None)
    mark = problem_mark or context_mark
    message = f"invalid YAML: {getattr(exc, 'problem', None) or exc}"
    if mark is None:
        return DocumentError(source, None, message)
    # At end of input the parser points past the last line; point at the last line instead.
    last_line = text.count("\n") + (0 if text.endswith("\n") else 1)
    line = max(1, min(mark.line + 1, last_line))
    context = getattr(exc, "context", None)
    if context and context_mark is not None and context_mark.line + 1 != line:
        message += f" ({context} at line {context_mark.line + 1})"
    return DocumentError(source, line, message)


# -- JSON


def check_depth(value: Any, max_depth: int) -> bool:
    """Whether ``value`` nests at most ``max_depth`` collections deep (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, dict):
            children: Any = current.values()
        elif isinstance(current, list):
            children = current
        else:
            continue
        if depth > max_depth:
            return False
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return True


def read_json(text: str, source: str, limits: InputSettings = DEFAULT_LIMITS) -> Any:
    """``text`` decoded as strict JSON, nested at most ``limits.max_depth`` deep."""
    from .strict_json import JsonBodyError, decode_json  # msgspec: only when JSON arrives

    try:
        value = decode_json(text.encode("utf-8", "surrogatepass"))
    except JsonBodyError as exc:
        raise DocumentError(source, exc.line, str(exc)) from None
    if not check_depth(value, limits.max_depth):
        raise DocumentError(source, 1, f"JSON nested deeper than {limits.max_depth} levels; refused")
    return value


def looks_like_json(text: str) -> bool:
    return text.lstrip().startswith(("{", "["))
