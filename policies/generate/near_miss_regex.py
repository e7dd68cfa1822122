"""GS007's near-miss test as RE2 regular expressions, for the backstop (policies/generate/backstop.py).

The API server's CEL has string functions (``lowerAscii``, ``replace``, ...), but cel-python,
which the tests evaluate the policy with, has none of them; both have ``matches``, and both run
it with RE2 (cel-go through Go's regexp, cel-python >= 0.5 through google-re2). So the test of
policies/model/near_miss.py -- the name part lower-cased, stripped of everything but letters and
digits and rewritten (``REWRITES``), its edit distance to the shared-GPU names, the "gpu"
prefix and the core-stem prefix; the domain stripped, lower-cased and compared with the
look-alike list and by edit distance -- is built here as finite automata over the characters of
a resource name, minimised, and written out as regular expressions by state elimination
(policies/generate/automata.py).

The automata follow the engine's definition step by step, reading its own parameters
(``near_miss.REWRITES``, ``GPU_PREFIX``, the edit limits, ``core_stem``, ``edit_distance``), so the
expressions are exact for every ASCII resource name, whatever names and domains the settings
give. Outside ASCII they may differ (Python's ``str.lower`` and RE2's case folding disagree on a
few letters, e.g. U+0130); the API server admits only ASCII resource names -- qualified names,
by validateContainerResourceName in Kubernetes' pkg/apis/core/validation/validation.go (via
validateResourceName and IsQualifiedName) -- and validating admission runs after that
validation, so no such key reaches the policy. tests/deploy/test_backstop_equivalence.py compares the
expressions with the engine.
"""

from __future__ import annotations

import string
from collections.abc import Hashable, Iterable
from functools import cache, lru_cache
from typing import Any

from policies.generate.automata import DEAD, EPS, Node, Renderer, concat, dfa_regex, either, minimal_dfa, symbol_node
from policies.model.near_miss import (
    DOMAIN_EDITS,
    GPU_PREFIX,
    MIN_CORE_STEM,
    NAME_EDITS,
    PREFIX_EDITS,
    REWRITES,
    canonical,
    core_stem,
    edit_distance,
)

ALNUM = string.digits + string.ascii_lowercase  # what canonical() keeps (after lower-casing)
# What Python's str.strip() removes among ASCII characters (str.isspace): \t \n \v \f \r, \x1c-\x1f, space.
ASCII_SPACE = "[\\t-\\r\\x1c- ]"
OTHER = "<other>"  # stands for every character the definition never names (a multi-character
FILLER = "<filler>"  # sentinel, so it equals no real character); FILLER: a non-alphanumeric in a name part

# -- the name part -------------------------------------------------------------------------------

def _ranges(chars: Iterable[str]) -> str:
    """The characters in ALNUM order, runs of three or more written as ranges (``a-e``)."""
    ordered = sorted(set(chars), key=ALNUM.index)
    out, i = [], 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ord(ordered[j + 1]) == ord(ordered[j]) + 1:
            j += 1
        out.append(f"{ordered[i]}-{ordered[j]}" if j - i >= 2 else "".join(ordered[i:j + 1]))
        i = j + 1
    return "".join(out)


@cache
def _row(row: tuple[int, ...] | None, target: str, c: str, limit: int) -> tuple[int, ...] | None:
    """One step of the edit-distance table of (name so far, target), capped at limit + 1."""
    if row is None:
        return None
    cap = limit + 1
    new = [min(row[0] + 1, cap)]
    for j in range(1, len(target) + 1):
        new.append(min(row[j] + 1, new[j - 1] + 1, row[j - 1] + (c != target[j - 1]), cap))
    return tuple(new) if min(new) <= limit else None


def _start_row(target: str, limit: int) -> tuple[int, ...]:
    return tuple(min(j, limit + 1) for j in range(len(target) + 1))


@cache
def _rewrite(pending: tuple[str, ...], stage: int, c: str) -> tuple[tuple[str, ...], str]:
    """Feed ``c`` to rewrite ``stage`` and the ones after it, as str.replace would do them in turn:
    each keeps the longest tail of its input that may still begin its word. Returns the new
    pending tails and the characters that come out of the last stage."""
    if stage == len(REWRITES):
        return pending, c
    old, new = REWRITES[stage]
    text = pending[stage] + c
    if text == old:
        out, keep = new, ""
    else:
        cut = next(i for i in range(len(text) + 1) if old.startswith(text[i:]))
        out, keep = text[:cut], text[cut:]
    pending = (*pending[:stage], keep, *pending[stage + 1:])
    emitted = ""
    for ch in out:
        pending, more = _rewrite(pending, stage + 1, ch)
        emitted += more
    return pending, emitted


def _flush(pending: tuple[str, ...]) -> str:
    emitted = ""
    for stage in range(len(REWRITES)):
        tail, pending = pending[stage], (*pending[:stage], "", *pending[stage + 1:])
        for ch in tail:
            pending, more = _rewrite(pending, stage + 1, ch)
            emitted += more
    return emitted


class _NamePart:
    """The automaton of "canonical(name part) is a near miss" (or, with ``mem_only``, a near
    miss of gpu_mem, the name meant_resource tries first) over the characters of a name part."""

    def __init__(self, gpu_mem: str, gpu_core: str, mem_only: bool) -> None:
        self.targets = [canonical(gpu_mem.rpartition("/")[2])]
        if not mem_only:
            self.targets.append(canonical(gpu_core.rpartition("/")[2]))
        stem = core_stem(gpu_core)
        self.stem = stem if not mem_only and len(stem) >= MIN_CORE_STEM else None
        named = set(GPU_PREFIX + "".join(self.targets) + (self.stem or "") + "".join(a + b for a, b in REWRITES))
        self.named = sorted(set(ALNUM) & named, key=ALNUM.index)
        self.others = [c for c in ALNUM if c not in named]
        self.letters = self.named + ([OTHER] if self.others else []) + [FILLER]

    def start(self) -> Hashable:
        # (pending rewrite tails, (characters seen, edit-distance row against GPU_PREFIX) until
        # len(GPU_PREFIX) characters passed the prefix test, then True; one edit-distance row per
        # target; characters of the stem matched, or -1)
        rows = tuple(_start_row(t, NAME_EDITS) for t in self.targets)
        return (("",) * len(REWRITES), (0, _start_row(GPU_PREFIX, PREFIX_EDITS)), rows, 0 if self.stem else -1)

    def _emit(self, state: Any, c: str) -> Any:
        pending, head, rows, stem = state
        if head is not True:
            count, row = head
            row = _row(row, GPU_PREFIX, c, PREFIX_EDITS)
            if row is None:  # name[:len(GPU_PREFIX)] can no longer pass
                return DEAD
            head = True if count + 1 == len(GPU_PREFIX) and row[-1] <= PREFIX_EDITS else (count + 1, row)
            if count + 1 == len(GPU_PREFIX) and head is not True:
                return DEAD
        rows = tuple(_row(r, t, c, NAME_EDITS) for r, t in zip(rows, self.targets, strict=True))
        if self.stem is not None and 0 <= stem < len(self.stem):
            stem = stem + 1 if c == self.stem[stem] else -1
        if self.stem is not None and stem == len(self.stem) and head is True:
            return "<all>"  # every longer name still starts with the stem
        if all(r is None for r in rows) and stem < 0:
            return DEAD
        return (pending, head, rows, stem)

    def step(self, state: Any, letter: str) -> Any:
        if state in (DEAD, "<all>") or letter == FILLER:
            return state
        c = self.others[0] if letter == OTHER else letter
        pending, emitted = _rewrite(state[0], 0, c)
        state = (pending, *state[1:])
        for ch in emitted:
            state = self._emit(state, ch)
            if state in (DEAD, "<all>"):
                break
        return state

    def accepts(self, state: Any) -> bool:
        if state == "<all>":
            return True
        for ch in _flush(state[0]):
            state = self._emit(state, ch)
            if state in (DEAD, "<all>"):
                return bool(state == "<all>")
        _, head, rows, stem = state
        if head is not True and head[1][-1] > PREFIX_EDITS:  # a name shorter than the prefix
            return False
        return any(r is not None and r[-1] <= NAME_EDITS for r in rows) or bool(
            self.stem is not None and stem == len(self.stem))

    def symbol(self, letters: frozenset[str]) -> str:
        chars = [c for c in self.named if c in letters] + (self.others if OTHER in letters else [])
        if FILLER in letters:  # the non-alphanumerics, and those letters; never "/" (it ends the domain)
            missing = [c for c in ALNUM if c not in chars]
            return f"[^/{_ranges(missing)}]" if missing else "[^/]"
        return chars[0] if len(chars) == 1 else f"[{_ranges(chars)}]"


@lru_cache(maxsize=16)
def name_part_regex(gpu_mem: str, gpu_core: str, mem_only: bool = False, before: str = "^") -> str:
    """RE2 that matches ``before`` + key when the key's part after the last "/" is a near miss
    by its name part alone (the domain is domain_regex's business). ``before``: a regex of what
    precedes the key in the string matched (the backstop writes "limits." or "requests.")."""
    part = _NamePart(gpu_mem, gpu_core, mem_only)
    renderer = Renderer(part.symbol)
    node = dfa_regex(minimal_dfa(part.start(), part.letters, part.step, part.accepts), renderer)
    return f"(?i)(?:{before}|/)" + (renderer.render(node)[0] if node is not None else NEVER) + "$"


# -- the domain ----------------------------------------------------------------------------------

def _escape(c: str) -> str:
    if c.isalnum() and c.isascii():
        return c
    if c.isascii() and c in string.punctuation:
        return "\\" + c
    return f"\\x{{{ord(c):x}}}"


ANY = "<any>"  # any one character (a substitution or an insertion)
NEVER = "[^\\x00-\\x{10FFFF}]"  # no character: a capital letter of the real domain never equals a lower-cased one


def _domain_symbol(letters: frozenset[str]) -> str:
    if ANY in letters:
        return "."  # under (?s): any character, "/" included (a domain is everything before the last "/")
    chars = sorted(c for c in letters if c == c.lower())
    if not chars:
        return NEVER
    return _escape(chars[0]) if len(chars) == 1 else "[" + "".join(_escape(c) for c in chars) + "]"


@cache
def _within(target: str, edits: int) -> Node:
    """The words within ``edits`` edits of ``target``, by the recurrence of edit distance: the
    first character of the target is kept, replaced, deleted, or a character is inserted before it."""
    if edits == 0:
        return concat(*(symbol_node([c]) for c in target))
    if not target:
        return either(EPS, concat(symbol_node([ANY]), _within("", edits - 1)))
    first, rest = target[0], target[1:]
    return either(concat(symbol_node([first]), _within(rest, edits)),
                  concat(symbol_node([ANY]), _within(rest, edits - 1)),
                  _within(rest, edits - 1), concat(symbol_node([ANY]), _within(target, edits - 1)))


@lru_cache(maxsize=16)
def domain_regex(gpu_mem: str, lookalikes: tuple[str, ...], before: str = "^") -> str:
    """RE2 that matches ``before`` + key when the key's domain -- all before the last "/", stripped
    and lower-cased -- may hold a near miss: none, a look-alike, or one within DOMAIN_EDITS of the
    real one. ``before`` as for name_part_regex, anchored at the start.

    The strip is ``\\s* core \\s*`` with ``core`` any of those: exact because a listed domain never
    starts or ends with white space (such an entry could never match, so it is left out) and the real
    domain has none (checked), so white space that ``core`` takes in only adds edits."""
    real = gpu_mem.rpartition("/")[0]
    if any(c.isspace() for c in real):
        raise ValueError(f"the domain of {gpu_mem!r} has white space; the backstop cannot express GS007 for it")
    listed = sorted(d for d in lookalikes if d and d == d.strip() and d == d.lower()
                    and edit_distance(d, real, DOMAIN_EDITS) > DOMAIN_EDITS)  # the others are within the edits
    core = either(EPS, _within(real, DOMAIN_EDITS), *(concat(*(symbol_node([c]) for c in d)) for d in listed))
    text = Renderer(_domain_symbol).render(core)[0]
    return f"(?is){before}(?:{ASCII_SPACE}*{text}{ASCII_SPACE}*/)?[^/]*$"
