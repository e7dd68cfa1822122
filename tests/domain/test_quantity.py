from decimal import Decimal

import pytest

from policies.model.quantity import QuantityError, parse_quantity


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


# The grammar's digits are ASCII: "١٢" (Arabic-Indic digits, which Python's Decimal would read as 12) is refused.
@pytest.mark.parametrize("raw", ["", "abc", "2 Gi", "2GB", "1e", "--1", True, None, [1], {"a": 1}, "9" * 100,
                                 float("nan"), "1e999", "\u0661\u0662", "\u00b2"])
def test_refuses_what_is_not_a_quantity(raw):
    with pytest.raises(QuantityError):
        parse_quantity(raw)


def test_parsed_strings_are_remembered_within_a_bound():
    from policies.model import quantity

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


# One row per suffix of the grammar (k8s.io/apimachinery resource.Quantity): binary SI, decimal SI.
@pytest.mark.parametrize(
    ("suffix", "scale"),
    [("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30), ("Ti", 2**40), ("Pi", 2**50), ("Ei", 2**60),
     ("m", Decimal("0.001")), ("", 1), ("k", 10**3), ("M", 10**6), ("G", 10**9), ("T", 10**12),
     ("P", 10**15), ("E", 10**18)],
)
def test_every_suffix_multiplies_by_its_scale(suffix, scale):
    assert parse_quantity(f"3{suffix}") == 3 * Decimal(scale)
    assert parse_quantity(f"1.5{suffix}") == Decimal("1.5") * scale


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1e30", Decimal(10) ** 30), ("1e-30", Decimal(10) ** -30), ("1E+30", Decimal(10) ** 30),
     ("2e0", Decimal(2)), ("5e-3", Decimal("0.005")), ("-1e3", Decimal(-1000)), ("1.", Decimal(1))],
)
def test_exponents_up_to_30_either_way(raw, expected):
    assert parse_quantity(raw) == expected


@pytest.mark.parametrize("raw", ["1e31", "1e-31", "1E+31"])
def test_exponents_beyond_30_are_refused(raw):
    with pytest.raises(QuantityError, match=r"exponent out of range"):
        parse_quantity(raw)


def test_length_boundary_is_64_characters():
    assert parse_quantity("9" * 64) == Decimal("9" * 64)  # the digits-only fast path
    assert parse_quantity("1" * 62 + "Gi") == int("1" * 62) * 2**30  # exact, not rounded to 28 digits
    assert parse_quantity("1" * 60 + "e30") == int("1" * 60) * 10**30
    assert parse_quantity("  " + "9" * 64 + "  ") == Decimal("9" * 64)  # padding does not count
    for raw in ("9" * 65, "1" * 63 + "Gi"):
        with pytest.raises(QuantityError, match=r"^quantity is longer than 64 characters$"):
            parse_quantity(raw)


@pytest.mark.parametrize(
    ("raw", "message"),
    [(True, "True is a boolean, not a quantity"), (None, "NoneType is not a quantity"),
     ([1], "list is not a quantity"), (float("inf"), "inf is not a finite number"),
     (float("-inf"), "-inf is not a finite number"), (float("nan"), "nan is not a finite number"),
     ("2GB", "'2GB' is not a quantity"), ("1e", "'1e' is not a quantity")],
)
def test_refusals_say_why(raw, message):
    with pytest.raises(QuantityError) as refused:
        parse_quantity(raw)
    assert str(refused.value) == message


def test_floats_are_read_as_written_not_as_binary_fractions():
    assert parse_quantity(0.1) == Decimal("0.1")
    assert parse_quantity(-2.0) == Decimal(-2)


def test_the_cache_keeps_every_value_until_it_is_full():
    from policies.model import quantity

    quantity._PARSED.clear()
    for i in range(quantity._PARSED_MAX):
        parse_quantity(f"{i}k")
    assert len(quantity._PARSED) == quantity._PARSED_MAX  # full, nothing dropped yet
    parse_quantity("7Mi")
    assert list(quantity._PARSED) == ["7Mi"]  # emptied when it filled, then the new value kept
