"""Captured text to values: sizes in bytes (binary units), numbers with nan/inf."""

from __future__ import annotations

import math

import pytest

from dsdoctor.rules.units import convert, is_nonfinite, parse_float, parse_int, parse_size


@pytest.mark.parametrize(("text", "value"), [
    ("2.00 GiB", 2 * 2**30), ("512.00 MiB", 512 * 2**20), ("20 MB", 20 * 2**20), ("1.5 KiB", 1536), ("512 bytes", 512),
    ("1 byte", 1), ("79.15 GiB", round(79.15 * 2**30)), ("12.5GB", round(12.5 * 2**30)), ("3", 3), ("2 TiB", 2 * 2**40),
])
def test_sizes(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "GiB", "1.2.3 GiB", "-1 GiB", "1 XB", "9" * 100])
def test_not_sizes(text: str) -> None:
    assert parse_size(text) is None


def test_numbers() -> None:
    assert math.isnan(parse_float("nan")) and math.isnan(parse_float("NaN")) and parse_float("-inf") == -math.inf
    assert parse_float("1.2E+00") == 1.2 and parse_float("'0.5',") == 0.5 and parse_float("x") is None
    assert parse_float(True) is None and parse_float(3) == 3.0
    assert parse_int("1,024") == 1024 and parse_int("7.0") == 7 and parse_int("7.5") is None and parse_int("nan") is None
    assert is_nonfinite("inf") and not is_nonfinite("1.0")


def test_convert_keeps_text_that_does_not_parse() -> None:
    assert convert("2.00 GiB", "size") == 2 * 2**30
    assert convert("lots", "size") == "lots" and convert("x", "int") == "x" and convert("a", "str") == "a"
