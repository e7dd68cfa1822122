"""Admission warnings and denial messages held to what the API server passes on (policies/model/
warning_text.py; k8s.io/api admission/v1 AdmissionResponse.Warnings: over 256 characters may be
truncated; k8s.io/apiserver pkg/endpoints/filters/warning.go: 4,096 runes in all), word for word:
what is kept, what is shortened, folded or dropped first, and the line that counts what was left out."""

from __future__ import annotations

import pytest

from policies.model.warning_text import bounded, brief, fold_ids, joined

LIMIT = 90
N41 = "n" + "0123456789" * 4  # a 41-character name: longer than a reader needs


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # What fits is kept as it is, even at the limit exactly.
        ("x" * 90, "x" * 90),
        ("GS001: " + "word " * 16 + "end", "GS001: " + "word " * 16 + "end"),
        # A long name is shortened in its middle; one of 40 characters is not.
        (f"GS003: Pod default/{N41}: a gpu-mem value that is not a whole number; use 6",
         "GS003: Pod default/n012345678901234567890…67890123456789: a gpu-mem value that is…; use 6"),
        (f"GS003: Pod default/{N41[:40]}: a gpu-mem value that is not whole at all; use 6",
         f"GS003: Pod default/{N41[:40]}: a gpu-mem value that…; use 6"),
        # Runs of rule ids of one family are folded.
        ("GB001, GB002, GB003, GC001: placement " + "not checked " * 6 + "; admitted",
         "GB001-GB003, GC001: placement not checked not checked not checked not checked…; admitted"),
        # The last clause is kept whole while shorter than a third of the limit (29 < 30)...
        ("GS001: " + "w " * 40 + "; " + "k" * 29,
         "GS001: " + "w " * 24 + "w…; " + "k" * 29),
        # ... and cut with the rest once it is not.
        ("GS001: " + "w " * 40 + "; " + "k " * 20, "GS001: " + "w " * 39 + "w…"),
        ("GS001: " + "w " * 40 + "; " + "k " * 15, "GS001: " + "w " * 39 + "w…"),
        # Parenthesised details are dropped longest first, only as many as needed.
        ("GS001: Pod p (first detail) (a much longer second detail here) (third) is refused; admitted (open)",
         "GS001: Pod p (first detail) (…) (third) is refused; admitted (open)"),
        ("GS001: Pod p (first detail) (a much longer second detail here) (third detail, longer) is refused (…) ok; "
         "admitted", "GS001: Pod p (first detail) (…) (third detail, longer) is refused (…) ok; admitted"),
        ("GS001: (one) (two) " + "z " * 60, "GS001: (…) (…) " + "z " * 36 + "z…"),
        # Cut at a word, without a trailing comma; where no word ends late enough, at the limit.
        ("GS001: " + "abcd, " * 20, "GS001: " + "abcd, " * 12 + "abcd…"),
        ("GS001: " + "ab~" * 40, "GS001: " + "ab~" * 27 + "a…"),
        # A word that ends before half the limit is not cut at: that would drop too much.
        ("GS001: " + "a" * 28 + " " + "b~" * 40, "GS001: " + "a" * 28 + " " + "b~" * 26 + "b…"),
    ],
)
def test_brief(message, expected):
    assert brief(message, LIMIT) == expected
    assert len(expected) <= LIMIT


def test_a_last_clause_of_a_third_of_the_limit_is_not_kept_whole():
    # 91 // 3 is 30: a last clause of 30 characters is cut with the rest.
    assert brief("GS001: " + "w " * 40 + "; " + "k" * 30, 91) == "GS001: " + "w " * 39 + "w…"
    assert brief("GS001: " + "w " * 40 + "; " + "k" * 29, 91) == "GS001: " + "w " * 25 + "w…; " + "k" * 29


def test_brief_holds_a_warning_to_256_characters_by_default():
    out = brief("GS001: " + "x " * 200)
    assert out == "GS001: " + "x " * 123 + "x…" and len(out) == 255


@pytest.mark.parametrize(
    ("ids", "folded"),
    [
        (["GB001", "GB002", "GB003", "GC001", "GC003", "GS009", "GS010", "GS011"],
         ["GB001-GB003", "GC001", "GC003", "GS009-GS011"]),
        (["GS009", "GS010", "GS012", "GS013"], ["GS009-GS010", "GS012-GS013"]),
        (["GSX14", "GSX15", "GA001"], ["GSX14", "GSX15", "GA001"]),  # not numbered: never folded
        (["GA001", "GB002"], ["GA001", "GB002"]),  # consecutive numbers of two families
        (["GA002", "GA001"], ["GA002", "GA001"]),
        (["GS099", "GS100"], ["GS099-GS100"]),
        (["GS108", "GS109"], ["GS108-GS109"]),
        (["GS300", "GS301", "GS302"], ["GS300-GS302"]),
        (["GB002", "GA003"], ["GB002", "GA003"]),
        (["GSX14", "GS015"], ["GSX14", "GS015"]),
        (["GS014", "GSX15"], ["GS014", "GSX15"]),
        ([], []),
    ],
)
def test_fold_ids(ids, folded):
    assert fold_ids(ids) == folded


HUNDRED = [f"GW00{i}: " + "t" * 93 for i in range(3)]  # three warnings of 100 characters


def test_bounded_keeps_what_fits_with_room_for_the_count_of_the_rest():
    assert bounded(HUNDRED, 456) == HUNDRED  # 100 + 100, and 256 left for the line if more followed
    assert bounded(HUNDRED, 455) == [
        HUNDRED[0], "… and 2 more warnings (GW001 x1, GW002 x1); the audit annotations name every rule"]
    assert bounded([*HUNDRED, HUNDRED[0], HUNDRED[1]], 456) == HUNDRED  # repeats said once
    assert bounded(HUNDRED, 456, what="findings")[-1] == HUNDRED[2]
    assert bounded(HUNDRED, 300, what="findings") == [
        "… and 3 more findings (GW000 x1, GW001 x1, GW002 x1); the audit annotations name every rule"]


def test_the_last_warning_needs_no_room_for_a_count_after_it():
    first, last = "GW001: " + "t" * 93, "GW002: " + "s" * 293
    assert bounded([first, last], 400, item=400) == [first, last]
    assert bounded([first, last], 399, item=400) == [
        first, "… and 1 more warnings (GW002 x1); the audit annotations name every rule"]


def test_bounded_leaves_the_count_its_room_whatever_the_total():
    long = [f"GW00{i}: " + "x" * 293 for i in range(3)]  # 300 characters each, kept whole with item=400
    assert bounded(long, 530, item=400) == [
        "… and 3 more warnings (GW000 x1, GW001 x1, GW002 x1); the audit annotations name every rule"]
    assert bounded(long, 1500, item=400) == long


def test_bounded_holds_each_warning_to_its_item_limit():
    assert bounded(["GS001: " + "x " * 200], 4096, item=60) == ["GS001: " + "x " * 25 + "x…"]
    assert bounded(["GS001: " + "x " * 200], 4096) == ["GS001: " + "x " * 123 + "x…"]


def test_the_count_of_what_was_left_out_names_rules_by_their_ids():
    texts = ["a: x", "b: y", "a long warning: z", "GS001234567890123: w", "GS00123456789012: v", "b: y2"]
    assert bounded(texts, 262) == [
        "a: x", "… and 5 more warnings (b x2, other x2, GS00123456789012 x1); the audit annotations name every rule"]


DENIALS = [f"GS00{i}: " + "u" * 93 for i in range(5)]  # five denials of 100 characters


def test_joined_keeps_whole_texts_then_counts_the_rest():
    # 100 + 2 + 100 + 2 + 100 = 304 fits in 560 - 256, not in 559 - 256.
    assert joined(DENIALS, 560, what="denials") == "; ".join(
        [*DENIALS[:3], "… and 2 more denials (GS003 x1, GS004 x1); the audit annotations name every rule"])
    assert joined(DENIALS, 559, what="denials") == "; ".join(
        [*DENIALS[:2], "… and 3 more denials (GS002 x1, GS003 x1, GS004 x1); the audit annotations name every rule"])
    assert joined(DENIALS, 561, what="denials", sep=" | ") == " | ".join(
        [*DENIALS[:2], "… and 3 more denials (GS002 x1, GS003 x1, GS004 x1); the audit annotations name every rule"])
    assert joined(DENIALS[:2], 4096, what="denials") == "; ".join(DENIALS[:2])
    assert joined([], 4096, what="denials") == ""


def test_joined_counts_each_separator_once():
    texts = [f"GS00{i}: " + "u" * 96 for i in range(4)]  # 103 characters each
    # 103 + 2 + 103 = 208 fits in 464 - 256; a third (313) does not fit in 568 - 256 = 312.
    for limit in (464, 568):
        assert joined(texts, limit, what="denials") == "; ".join(
            [*texts[:2], "… and 2 more denials (GS002 x1, GS003 x1); the audit annotations name every rule"])
    assert joined(texts, 569, what="denials").startswith("; ".join(texts[:3]) + "; … and 1 more")


def test_joined_leaves_room_for_the_count_after_a_first_text_of_middling_length():
    first = "GS001: " + "w " * 96 + "x"  # 200 characters: more than 400 - 256
    assert joined([first, "GS002: x"], 400, what="denials") == (
        "GS001: " + "w " * 67 + "w…; … and 1 more denials (GS002 x1); the audit annotations name every rule")


def test_joined_shortens_only_the_first_text():
    assert joined(["GS001: a", "GS002: b (" + "d" * 400 + ") end"], 556, what="denials") == (
        "GS001: a; … and 1 more denials (GS002 x1); the audit annotations name every rule")


def test_joined_shortens_a_first_text_too_long_alone():
    assert joined(["GS001: " + "w " * 300], 400, what="denials") == "GS001: " + "w " * 67 + "w…"
    assert joined(["GS001: " + "w " * 300], 556, what="denials") == "GS001: " + "w " * 145 + "w…"
    assert joined(["GS001: " + "w " * 300, "GS002: short"], 400, what="denials") == (
        "GS001: " + "w " * 67 + "w…; … and 1 more denials (GS002 x1); the audit annotations name every rule")


def test_a_text_that_fits_once_its_details_are_dropped_is_not_cut():
    message = ("GS001: " + "w " * 40)[:87] + "(" + "d " * 20 + ")"
    assert brief(message, 90) == ("GS001: " + "w " * 40)[:87] + "(…)"


def test_bounded_keeps_the_last_of_hundreds_of_warnings_without_room_for_a_count():
    texts = [f"a:{i:03}" for i in range(300)]
    assert bounded(texts, 1751) == texts
    assert bounded(texts, 1750)[-1] == "… and 2 more warnings (a x2); the audit annotations name every rule"
