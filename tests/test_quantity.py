from decimal import Decimal

import pytest

from policies.quantity import QuantityError, binary_suffix, parse_quantity


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (5, Decimal(5)),
        ("5", Decimal(5)),
        ("2500m", Decimal("2.5")),
        ("2Gi", Decimal(2 * 2**30)),
        ("1Ki", Decimal(1024)),
        ("1k", Decimal(1000)),
        ("1e3", Decimal(1000)),
        ("1E", Decimal(10**18)),
        ("+.5", Decimal("0.5")),
        ("-3", Decimal(-3)),
        (2.5, Decimal("2.5")),
        (" 7 ", Decimal(7)),
    ],
)
def test_parses_kubernetes_quantities(raw, expected):
    assert parse_quantity(raw) == expected


@pytest.mark.parametrize("raw", ["", "abc", "2 Gi", "2GB", "1e", "--1", True, None, [1], {"a": 1}, "9" * 100,
                                 float("nan"), "1e999"])
def test_refuses_what_is_not_a_quantity(raw):
    with pytest.raises(QuantityError):
        parse_quantity(raw)


def test_binary_suffix_is_reported_only_for_binary_units():
    assert binary_suffix("2Gi") == "Gi"
    assert binary_suffix("2G") is None
    assert binary_suffix(2) is None


def test_parsed_strings_are_remembered_within_a_bound():
    from policies import quantity

    quantity._PARSED.clear()
    for i in range(quantity._PARSED_MAX + 10):
        assert parse_quantity(str(i)) == i
    assert 0 < len(quantity._PARSED) <= quantity._PARSED_MAX
    padded = " " * 10_000 + "4"  # parsed, but a key this long is never kept
    assert parse_quantity(padded) == 4 and padded not in quantity._PARSED
    with pytest.raises(QuantityError):
        parse_quantity("4x")
    assert "4x" not in quantity._PARSED
    assert parse_quantity("2Gi") is parse_quantity("2Gi")  # the second read is the remembered Decimal
