"""What GS003 says of a gpu-mem value (policies/model/gpu_memory.py), word for word: the reason, the
fix and the value the fix names, in GiB and MiB clusters, on one card and spread over several by the
multi-GPU pod label (ACK "Use cGPU to achieve GPU sharing based on multiple GPUs": N over M cards).
The values are read from a container's limits as the engine reads them."""

from __future__ import annotations

import pytest

from policies.model.gpu_memory import memory_problem
from policies.model.resources import read_values
from policies.model.settings import Names

GIB, MIB = Names(), Names(memory_unit="MiB")
NOT_ONE_OR_MORE = ("is not 1 or more {u}", "use a whole number of {u}, 1 or more", None)
MIB_HINT = "or set names.memory_unit: MiB if the device plugin counts MiB"


def problem(raw, names: Names, cards: int):
    mem = names.resources.gpu_mem
    value = read_values({"limits": {mem: raw}}, "limits", ("spec", "containers", 0, "resources"), frozenset({mem}))[mem]
    found = memory_problem(value, names, cards)
    return found if found is None else (found.why, found.fix, found.accepted)


@pytest.mark.parametrize(
    ("names", "cards", "raw"),
    [
        (GIB, 1, "4"), (GIB, 1, 4), (GIB, 1, "2000m"), (GIB, 1, "1"), (GIB, 1, "1024"), (GIB, 1, "1k"),
        (GIB, 2, "1025"), (GIB, 2, "2048"), (GIB, 3, "3072"),
        (MIB, 1, "16276"), (MIB, 1, "1048576"), (MIB, 2, "2097152"),
    ],
)
def test_a_whole_count_up_to_what_the_cards_hold_passes(names, cards, raw):
    assert problem(raw, names, cards) is None


@pytest.mark.parametrize(
    ("names", "cards", "raw", "expected"),
    [
        # Not a whole count: never rounded down (a container given less memory than it asked for fails).
        (GIB, 1, "5.5", ("is not a whole number of GiB", "use 6", "6")),
        (GIB, 1, "0.5", ("is not a whole number of GiB", "use 1", "1")),
        (GIB, 2, "1023.5", ("is not a whole number of GiB", "use 1024", "1024")),
        (MIB, 1, "5.5", ("is not a whole number of MiB", "use 6", "6")),
        # Nothing, or less.
        (GIB, 1, "0", ("is not 1 or more GiB", "use a whole number of GiB, 1 or more", None)),
        (GIB, 2, "-1", ("is not 1 or more GiB", "use a whole number of GiB, 1 or more", None)),
        (MIB, 1, "0", ("is not 1 or more MiB", "use a whole number of MiB, 1 or more", None)),
        (GIB, 1, "abc", ("is not a quantity ('abc' is not a quantity)", "use a whole number of GiB, 1 or more",
                         None)),
        # More than the cards hold, under 2**20 per card in GiB: MiB someone wrote (the extender's old sample).
        (GIB, 1, "1025", ("is more than any card holds (at most 1024 GiB) and looks like MiB (2 GiB rounded up)",
                          f"use 2, {MIB_HINT}", "2")),
        (GIB, 1, "16276", ("is more than any card holds (at most 1024 GiB) and looks like MiB (16 GiB rounded up)",
                           f"use 16, {MIB_HINT}", "16")),
        (GIB, 1, "1048575", ("is more than any card holds (at most 1024 GiB) and looks like MiB "
                             "(1024 GiB rounded up)", f"use 1024, {MIB_HINT}", "1024")),
        (GIB, 2, "2049", ("is more than 2 cards hold (2 cards hold at most 1024 GiB each, 2048 GiB in all) and "
                          "looks like MiB (3 GiB rounded up)", f"use 3, {MIB_HINT}", "3")),
        (GIB, 2, "2097151", ("is more than 2 cards hold (2 cards hold at most 1024 GiB each, 2048 GiB in all) and "
                             "looks like MiB (2048 GiB rounded up)", f"use 2048, {MIB_HINT}", "2048")),
        (GIB, 3, "3073", ("is more than 3 cards hold (3 cards hold at most 1024 GiB each, 3072 GiB in all) and "
                          "looks like MiB (4 GiB rounded up)", f"use 4, {MIB_HINT}", "4")),
        # 2**20 per card and more: bytes, counted in the unit and rounded up.
        (GIB, 1, "1048576", ("looks like bytes, but the resource counts GiB", "use 1", "1")),
        (GIB, 1, "2Gi", ("looks like bytes, but the resource counts GiB", "use 2", "2")),
        (GIB, 1, "10G", ("looks like bytes, but the resource counts GiB", "use 10", "10")),
        (GIB, 1, "1Ti", ("looks like bytes, but the resource counts GiB", "use 1024", "1024")),
        (GIB, 2, "2097152", ("looks like bytes, but the resource counts GiB", "use 1", "1")),
        (GIB, 2, "2Ti", ("looks like bytes, but the resource counts GiB", "use 2048", "2048")),
        (MIB, 1, "1048577", ("looks like bytes, but the resource counts MiB", "use 2", "2")),
        (MIB, 1, "2Gi", ("looks like bytes, but the resource counts MiB", "use 2048", "2048")),
        (MIB, 2, "2Ti", ("looks like bytes, but the resource counts MiB", "use 2097152", "2097152")),
        # Bytes that are still more than the cards hold: no count to suggest, the range instead.
        (GIB, 1, "2Ti", ("is more than any card holds (at most 1024 GiB)", "use a whole number of GiB up to 1024",
                         None)),
        (GIB, 1, str(int(1024.5 * 2**30)), ("is more than any card holds (at most 1024 GiB)",
                                            "use a whole number of GiB up to 1024", None)),
        (GIB, 1, "1e30", ("is more than any card holds (at most 1024 GiB)", "use a whole number of GiB up to 1024",
                          None)),
        (GIB, 2, "3Ti", ("is more than 2 cards hold (2 cards hold at most 1024 GiB each, 2048 GiB in all)",
                         "use a whole number of GiB up to 2048", None)),
        (MIB, 1, "2Ti", ("is more than any card holds (at most 1048576 MiB)",
                         "use a whole number of MiB up to 1048576", None)),
        (MIB, 2, "3Ti", ("is more than 2 cards hold (2 cards hold at most 1048576 MiB each, 2097152 MiB in all)",
                         "use a whole number of MiB up to 2097152", None)),
    ],
)
def test_a_refused_value_says_why_and_what_to_write(names, cards, raw, expected):
    assert problem(raw, names, cards) == expected
