"""Finite automata written out as RE2 (policies/generate/automata.py): the minimal DFA of a step function
and its regular expression by state elimination. Each language here is small enough to check word by
word: the regex (matched with google-re2, as cel-python's ``matches`` does) accepts exactly the words
the step function accepts, up to a length."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import re2

from policies.generate.automata import (
    DEAD,
    EPS,
    Renderer,
    concat,
    dfa_regex,
    either,
    minimal_dfa,
    symbol_node,
)

LETTERS = ["a", "b", "c"]


def symbol(letters: frozenset[str]) -> str:
    chars = sorted(letters)
    return chars[0] if len(chars) == 1 else f"[{''.join(chars)}]"


def words(most: int = 6) -> list[str]:
    return ["".join(w) for n in range(most + 1) for w in itertools.product(LETTERS, repeat=n)]


def run(step: Callable[[Any, str], Any], accepts: Callable[[Any], bool], start: Any, word: str) -> bool:
    state = start
    for c in word:
        state = step(state, c)
        if state == DEAD:
            return False
    return accepts(state)


# (what, start, step, accepts, the minimal DFA's states)
LANGUAGES = [
    ("an even number of a", 0, lambda s, c: (s + (c == "a")) % 2, lambda s: s == 0, 2),
    ("contains ab", "", lambda s, c: "ab" if s == "ab" else ("ab" if s == "a" and c == "b" else
                                                           ("a" if c == "a" else "")), lambda s: s == "ab", 3),
    ("exactly abc", "", lambda s, c: s + c if "abc".startswith(s + c) else DEAD, lambda s: s == "abc", 5),
    ("a or b then c, counted to 4", 0, lambda s, c: min(s + 1, 4), lambda s: s in (1, 3), 5),
    ("ends with c, redundant states", (0, 0), lambda s, c: ((s[0] + 1) % 3, int(c == "c")), lambda s: s[1] == 1, 2),
    ("nothing", 0, lambda s, c: DEAD, lambda s: False, 1),
    ("only the empty word", 0, lambda s, c: DEAD, lambda s: s == 0, 2),
    ("every word", 0, lambda s, c: 0, lambda s: True, 1),
    ("at most two letters, never b", 0, lambda s, c: DEAD if s == DEAD or c == "b" or s == 2 else s + 1,
     lambda s: True, 4),
]


@pytest.mark.parametrize(("what", "start", "step", "accepts", "states"), LANGUAGES, ids=[x[0] for x in LANGUAGES])
def test_the_regex_accepts_exactly_the_language_of_the_step_function(what, start, step, accepts, states):
    dfa = minimal_dfa(start, LETTERS, step, accepts)
    assert dfa[3] == states
    renderer = Renderer(symbol)
    node = dfa_regex(dfa, renderer)
    expected = [w for w in words() if run(step, accepts, start, w)]
    if node is None:
        assert expected == []
        return
    regex = f"^(?:{renderer.render(node)[0]})$"
    assert [w for w in words() if re2.search(regex, w)] == expected, regex
    assert renderer.size(node) == len(renderer.render(node)[0]) and renderer.size(None) == 0


@pytest.mark.parametrize("what", [x[0] for x in LANGUAGES])
def test_the_minimal_dfa_accepts_what_the_step_function_accepts(what):
    _, start, step, accepts, _ = next(x for x in LANGUAGES if x[0] == what)
    begin, moves, accepting, _ = minimal_dfa(start, LETTERS, step, accepts)
    for word in words(5):
        state = begin
        for c in word:
            state = moves[(state, c)]
        assert (state in accepting) == run(step, accepts, start, word), word


def a(text: str) -> Any:
    return concat(*(symbol_node([c]) for c in text))


NODES = [  # (what, the node (built in the test, not at import), the words it means)
    ("one letter", lambda: symbol_node(["a"]), {"a"}),
    ("letters", lambda: either(symbol_node(["a"]), symbol_node(["b", "c"])), {"a", "b", "c"}),
    ("a word", lambda: a("abc"), {"abc"}),
    ("the empty word", lambda: EPS, {""}),
    ("a word or nothing", lambda: either(EPS, a("ab")), {"", "ab"}),
    ("a common first part", lambda: either(a("ab"), a("ac"), a("abc")), {"ab", "ac", "abc"}),
    ("a common last part", lambda: either(a("bc"), a("cc"), a("c")), {"bc", "cc", "c"}),
    ("nested choices", lambda: either(a("a"), either(a("b"), a("cc")), EPS), {"a", "b", "cc", ""}),
    ("words in words", lambda: concat(either(a("a"), a("bb")), either(EPS, a("c")), a("a")),
     {"aa", "aca", "bba", "bbca"}),
    ("the same choice twice", lambda: either(a("ab"), a("ab")), {"ab"}),
]


@pytest.mark.parametrize(("what", "node", "meant"), NODES, ids=[n[0] for n in NODES])
def test_a_regular_expression_value_renders_to_its_words(what, node, meant):
    regex = f"^(?:{Renderer(symbol).render(node())[0]})$"
    assert {w for w in words(4) if re2.search(regex, w)} == meant, regex


# The exact text each language and value above renders to. Generated files hold such text, so the
# same language in other words (another elimination order, choice order or factoring) is a change:
# every shipped file would have to be generated again.
TEXTS = {
    "an even number of a": "(?:[bc]|a[bc]*a)*",
    "contains ab": "(?:[bc]|aa*c)*aa*b[abc]*",
    "exactly abc": "abc",
    "a or b then c, counted to 4": "[abc](?:[abc][abc])?",
    "ends with c, redundant states": "(?:(?:cc*)?[ab])*cc*",
    "only the empty word": "",
    "every word": "[abc]*",
    "at most two letters, never b": "(?:[ac][ac]?)?",
    "one letter": "a",
    "letters": "[abc]",
    "a word": "abc",
    "the empty word": "",
    "a word or nothing": "(?:ab)?",
    "a common first part": "a(?:[bc]|bc)",
    "a common last part": "bc|cc?",
    "nested choices": "(?:[ab]|cc)?",
    "words in words": "(?:a|bb)c?a",
    "the same choice twice": "ab",
}


@pytest.mark.parametrize("what", sorted(TEXTS))
def test_each_language_and_value_renders_to_the_same_text_every_time(what):
    renderer = Renderer(symbol)
    language = next((x for x in LANGUAGES if x[0] == what), None)
    if language is not None:
        _, start, step, accepts, _ = language
        node = dfa_regex(minimal_dfa(start, LETTERS, step, accepts), renderer)
    else:
        node = next(n for n in NODES if n[0] == what)[1]()
    assert node is not None and renderer.render(node)[0] == TEXTS[what]


def test_the_rendering_is_the_same_whatever_the_order_of_choices():
    renderer = Renderer(symbol)
    one = renderer.render(either(a("ab"), a("ca"), a("b"), EPS))[0]
    other = renderer.render(either(EPS, a("b"), a("ca"), a("ab")))[0]
    assert one == other



# docs/operations.md ("What GS007 costs the API server") works out cel-go's cost from these lengths of the
# backstop's regexes (ceil(length / 4) units a character of the key); a change to either means the figures
# there must be worked out again (python bench/backstop_cost.py).
DOCUMENTED_LENGTHS = (1455, 2532)


def test_the_backstop_s_near_miss_regexes_are_as_long_as_the_documented_cost_says():
    """A longer regex, from a worse elimination order or an unfactored choice, costs every pod more."""
    from policies.generate.backstop import SECTION
    from policies.generate.near_miss_regex import domain_regex, name_part_regex
    from webhook.settings import Settings

    settings = Settings()
    r = settings.names.resources
    assert (len(name_part_regex(r.gpu_mem, r.gpu_core, before=SECTION)),
            len(domain_regex(r.gpu_mem, tuple(settings.near_miss.lookalike_domains), before=SECTION))) == \
        DOCUMENTED_LENGTHS


def test_the_backstop_s_near_miss_regexes_are_those_the_shipped_policy_holds():
    """The shipped policy is generated text: an elimination order or a choice order that gave the same
    language in other words would make it stale (``gpushare generate --check`` fails) and change what
    every cluster runs. Both regexes appear, as written in a CEL string, in the shipped policy."""
    from pathlib import Path

    import yaml

    from policies.generate.backstop import SECTION
    from policies.generate.near_miss_regex import domain_regex, name_part_regex
    from webhook.settings import Settings

    settings = Settings()
    r = settings.names.resources
    shipped = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gpushare-webhook" / "files" / "backstop.yaml"
    expressions = [v["expression"] for doc in yaml.safe_load_all(shipped.read_text(encoding="utf-8")) if doc
                   for v in doc.get("spec", {}).get("variables", [])]
    for regex in (name_part_regex(r.gpu_mem, r.gpu_core, before=SECTION),
                  domain_regex(r.gpu_mem, tuple(settings.near_miss.lookalike_domains), before=SECTION)):
        written = regex.replace("\\", "\\\\").replace("'", "\\'")
        assert any(written in e for e in expressions), regex

