"""Numbers typed into forms and query strings."""

import pytest

from kece.converters import whole_number


@pytest.mark.parametrize("raw, number", [("42", 42), (" 7 ", 7), ("0", 0), ("007", 7), ("9" * 18, int("9" * 18))])
def test_ascii_digits_are_a_whole_number(raw, number):
    assert whole_number(raw) == number


@pytest.mark.parametrize("raw", [None, "", " ", "²", "١٢", "-1", "+1", "1.5", "1e3", "1_000", "0x10", "9" * 19,
                                 "9" * 5000])
def test_anything_else_is_none(raw):
    assert whole_number(raw) is None
