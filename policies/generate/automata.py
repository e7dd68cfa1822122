"""Regular expressions as values, and finite automata written out as RE2 expressions: the minimal DFA
of a step function over a set of letters, and its regular expression by state elimination. Nothing
here knows resource names; policies/generate/near_miss_regex.py builds GS007's automata on it."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from functools import lru_cache
from typing import Any

# -- regular expressions as values ------------------------------------------------------------------
# ("sym", letters) | ("cat", parts) | ("alt", choices) | ("star", node); EPS is the empty word.

Node = tuple[Any, ...]
EPS: Node = ("cat", ())


def symbol_node(letters: Iterable[str]) -> Node:
    return ("sym", frozenset(letters))


def concat(*parts: Node) -> Node:
    flat: list[Node] = []
    for part in parts:
        flat.extend(part[1] if part[0] == "cat" else (part,))
    return flat[0] if len(flat) == 1 else ("cat", tuple(flat))


def _first(node: Node) -> tuple[Node, Node]:
    if node[0] == "cat":
        return node[1][0], concat(*node[1][1:])
    return node, EPS


def _last_first(node: Node) -> tuple[Node, Node]:
    """(last part, what comes before it)."""
    if node[0] == "cat":
        return node[1][-1], concat(*node[1][:-1])
    return node, EPS


def either(*choices: Node) -> Node:
    flat: set[Node] = set()
    letters: set[str] = set()
    for choice in choices:
        for c in (choice[1] if choice[0] == "alt" else (choice,)):
            if c[0] == "sym":
                letters |= c[1]
            else:
                flat.add(c)
    if letters:
        flat.add(symbol_node(letters))
    empty = EPS in flat
    # In no particular order (a set's order varies by process): what follows depends on the set only,
    # and the renderer sorts each choice by its text, so the output is the same every run.
    rest = [c for c in flat if c != EPS]
    # Factor common first parts (a b | a c -> a (b|c)), else common last parts (b a | c a -> (b|c) a).
    joins: tuple[tuple[Callable[[Node], tuple[Node, Node]], Callable[[Node, Node], Node]], ...] = (
        (_first, lambda part, tail: concat(part, tail)), (_last_first, lambda part, init: concat(init, part)))
    for split, join in joins:
        groups: dict[Node, list[Node]] = {}
        for c in rest:
            part, other = split(c)
            groups.setdefault(part, []).append(other)
        if len(groups) < len(rest):
            merged = [join(part, others[0] if len(others) == 1 else either(*others)) for part, others in groups.items()]
            return either(*merged, *([EPS] if empty else []))
    out = frozenset(rest) | ({EPS} if empty else set())
    return next(iter(out)) if len(out) == 1 else ("alt", out)


def _star(node: Node) -> Node:
    # Only a state's self-loop is starred: symbols and paths through other states, never the empty word,
    # an alternative holding it or a star (only the edges from "begin" and to "end" are empty).
    return ("star", node)


class Renderer:
    """RE2 text of a Node; ``symbol`` renders a set of letters as one character class."""

    def __init__(self, symbol: Callable[[frozenset[str]], str]) -> None:
        self.symbol = symbol
        self.render = lru_cache(maxsize=None)(self._render)

    def _atom(self, node: Node) -> str:
        text, kind = self.render(node)
        return text if kind == "atom" else f"(?:{text})"

    def _render(self, node: Node) -> tuple[str, str]:
        kind = node[0]
        if kind == "sym":
            return self.symbol(node[1]), "atom"
        if kind == "star":
            return self._atom(node[1]) + "*", "cat"
        if kind == "cat":
            return "".join(self.render(p)[0] if self.render(p)[1] != "alt" else f"(?:{self.render(p)[0]})"
                           for p in node[1]), "cat"
        choices = [c for c in node[1] if c != EPS]
        if EPS in node[1]:
            inner = choices[0] if len(choices) == 1 else ("alt", frozenset(choices))
            return self._atom(inner) + "?", "cat"
        return "|".join(sorted(self.render(c)[0] for c in choices)), "alt"

    def size(self, node: Node | None) -> int:
        return 0 if node is None else len(self.render(node)[0])


# -- automata ------------------------------------------------------------------------------------

DEAD = "<dead>"


def minimal_dfa(start: Hashable, letters: list[str], step: Callable[[Any, str], Any],
                accepts: Callable[[Any], bool]) -> tuple[int, dict[tuple[int, str], int], set[int], int]:
    """The minimal DFA of ``step`` from ``start``: (start, transitions, accepting, state count)."""
    index: dict[Hashable, int] = {start: 0}
    order: list[Hashable] = [start]
    moves: dict[tuple[int, str], int] = {}
    for i, state in enumerate(order):  # grows while iterating: breadth-first exploration
        for letter in letters:
            nxt = step(state, letter)
            if nxt not in index:
                index[nxt] = len(order)
                order.append(nxt)
            moves[(i, letter)] = index[nxt]
    accepting = {i for i, s in enumerate(order) if s != DEAD and accepts(s)}
    # Moore's partition refinement.
    block = [1 if i in accepting else 0 for i in range(len(order))]
    while True:
        signatures = {i: (block[i], *(block[moves[(i, a)]] for a in letters)) for i in range(len(order))}
        numbering: dict[tuple[int, ...], int] = {}
        refined = [numbering.setdefault(signatures[i], len(numbering)) for i in range(len(order))]
        if len(numbering) == len(set(block)):
            break
        block = refined
    minimal = {(block[i], a): block[j] for (i, a), j in moves.items()}
    return block[0], minimal, {block[i] for i in accepting}, len(set(block))


def dfa_regex(dfa: tuple[int, dict[tuple[int, str], int], set[int], int], renderer: Renderer) -> Node | None:
    """A regular expression of the DFA's language (None when empty), by state elimination."""
    start, moves, accepting, _ = dfa
    # States from which an accepting state is reachable; the others are dropped.
    live = set(accepting)
    changed = True
    while changed:
        changed = False
        for (p, _), q in moves.items():
            if q in live and p not in live:
                live.add(p)
                changed = True
    if start not in live:
        return None
    begin, end = "begin", "end"
    edges: dict[tuple[Any, Any], Node] = {}
    grouped: dict[tuple[int, int], set[str]] = {}
    for (p, letter), q in moves.items():
        if p in live and q in live:
            grouped.setdefault((p, q), set()).add(letter)
    for key, letters in grouped.items():
        edges[key] = symbol_node(letters)
    edges[(begin, start)] = EPS
    for f in accepting:
        edges[(f, end)] = EPS
    remaining = set(live)
    while remaining:
        def weight(k: int) -> int:
            ins = [r for (p, q), r in edges.items() if q == k and p != k]
            outs = [r for (p, q), r in edges.items() if p == k and q != k]
            loop = renderer.size(edges.get((k, k)))
            return (len(outs) * sum(map(renderer.size, ins)) + len(ins) * sum(map(renderer.size, outs))
                    + len(ins) * len(outs) * loop)
        k = min(sorted(remaining), key=weight)
        remaining.discard(k)
        loop = edges.pop((k, k), None)
        middle = _star(loop) if loop is not None else EPS
        ins = [(p, edges.pop((p, q))) for (p, q) in list(edges) if q == k]
        outs = [(q, edges.pop((p, q))) for (p, q) in list(edges) if p == k]
        for p, into in ins:
            for q, out in outs:
                path = concat(into, middle, out)
                edges[(p, q)] = either(edges[(p, q)], path) if (p, q) in edges else path
    return edges.get((begin, end))
