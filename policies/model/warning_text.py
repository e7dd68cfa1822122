"""Admission warnings the API server passes on whole.

The AdmissionResponse contract (k8s.io/api admission/v1, ``AdmissionResponse.Warnings``): "Limit
warnings to 120 characters if possible. Warnings over 256 characters and large numbers of
warnings may be truncated." Rule messages say first what is decided about which object (rule
id, object, what does not fit, what would be accepted) and last what the webhook did (e.g.
"admitted without the check"); details go in parentheses. A message over the limit is made to
fit in steps, each only as far as needed: names longer than a reader needs (object names may
have 253 characters) are shortened in their middle, runs of rule ids folded ("GB001-GB005");
the last clause (after the last "; "), when
short, is kept whole; before it, parenthesised details are dropped, longest first, then the text
is cut at a word. Each cut is marked "…". The full text stays where there is room: ``/dry-run``,
``gpushare check``/``explain`` and the review's audit annotations.
"""

from __future__ import annotations

import re

WARNING_LIMIT = 256
# A name is shortened past this length, to its first and last characters around "…".
NAME_LIMIT = 40
_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{{NAME_LIMIT},}}")
_HEAD, _TAIL = 22, 14
# A list of rule ids of one family, as the engine names the rules a fail-open verdict covers.
_IDS = re.compile(r"\b([A-Z]{2})\d{3}(?:, \1\d{3})+\b")
# A parenthesised detail without nested parentheses.
_DETAIL = re.compile(r"\([^()]*\)")


def _shorten_name(match: re.Match[str]) -> str:
    name = match.group(0)
    return f"{name[:_HEAD]}…{name[-_TAIL:]}"


def fold_ids(ids: list[str]) -> list[str]:
    """Runs of consecutive rule ids of one family folded: GB001, ..., GB005, GC001 -> GB001-GB005, GC001."""
    runs: list[list[str]] = []
    for rule_id in ids:
        last = runs[-1][-1] if runs else ""
        if last[:2] == rule_id[:2] and last[2:].isdigit() and rule_id[2:].isdigit() \
                and int(rule_id[2:]) == int(last[2:]) + 1:
            runs[-1].append(rule_id)
        else:
            runs.append([rule_id])
    return [run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs]


def _fold_ids(match: re.Match[str]) -> str:
    return ", ".join(fold_ids(match.group(0).split(", ")))


def _drop_details(text: str, limit: int) -> str:
    """Parenthesised details replaced by "(…)", longest first, until ``text`` fits."""
    while len(text) > limit:
        groups = [m for m in _DETAIL.finditer(text) if m.group(0) != "(…)"]
        if not groups:
            break
        longest = max(groups, key=lambda m: len(m.group(0)))
        text = text[: longest.start()] + "(…)" + text[longest.end():]
    return text


def _cut_at_word(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ;:,") + "…"


def brief(message: str, limit: int = WARNING_LIMIT) -> str:
    """``message`` in at most ``limit`` characters, its beginning and its last clause kept."""
    if len(message) <= limit:
        return message
    text = _IDS.sub(_fold_ids, _NAME.sub(_shorten_name, message))
    head, sep, last = text.rpartition("; ")
    if not sep or len(last) >= limit // 3:  # no short last clause to keep whole
        return _cut_at_word(_drop_details(text, limit), limit)
    room = limit - len(last) - len(sep)
    return _cut_at_word(_drop_details(head, room), room) + sep + last


# What the API server passes on of a response's warnings (k8s.io/apiserver, pkg/endpoints/filters/
# warning.go: truncateAtTotalRunes = 4 * 1024, truncateItemRunes = 256): warnings are added whole
# while their runes total at most 4,096; past that every warning is cut to 256 runes and, once the
# cut ones again total 4,096, the rest are dropped. So an answer never needs more than this.
WARNINGS_TOTAL_LIMIT = 4096
# A denial's message (the Status the user reads) and each audit annotation are held to the same size.
MESSAGE_LIMIT = 4096


def _rule_of(text: str) -> str:
    head = text.split(":", 1)[0]
    return head if head and len(head) <= 16 and " " not in head else "other"


def _summary(left: list[str], what: str) -> str:
    """"… and 5153 more warnings (GW001 x5153)": what ``left`` held, by rule."""
    counts: dict[str, int] = {}
    for text in left:
        rule = _rule_of(text)
        counts[rule] = counts.get(rule, 0) + 1
    by_rule = ", ".join(f"{rule} x{n}" for rule, n in counts.items())
    return brief(f"… and {len(left)} more {what} ({by_rule}); the audit annotations name every rule")


def bounded(texts: list[str], total: int, *, what: str = "warnings", item: int = WARNING_LIMIT) -> list[str]:
    """``texts`` without repeats, each in at most ``item`` characters, in at most ``total``
    characters together: as many as fit in order, then one line saying how many more, of which
    rules, were left out."""
    out: list[str] = []
    used = 0
    unique = list(dict.fromkeys(texts))
    last = len(unique) - 1
    for index, text in enumerate(unique):
        text = brief(text, item)
        room = total - used - (WARNING_LIMIT if index < last else 0)  # room for the summary if more follow
        if len(text) > room:
            return [*out, _summary(unique[index:], what)]
        out.append(text)
        used += len(text)
    return out


def joined(texts: list[str], limit: int, *, what: str, sep: str = "; ") -> str:
    """``texts`` joined by ``sep`` in at most about ``limit`` characters: as many whole as fit,
    then how many more were left out, by rule."""
    out: list[str] = []
    used = 0
    for index, text in enumerate(texts):
        if not out and len(text) > limit - WARNING_LIMIT:
            text = brief(text, limit - WARNING_LIMIT)
        if out and used + len(sep) + len(text) > limit - WARNING_LIMIT:
            return sep.join([*out, _summary(texts[index:], what)])
        out.append(text)
        used += len(text) + (len(sep) if len(out) > 1 else 0)
    return sep.join(out)
