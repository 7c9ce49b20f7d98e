"""Argument types the commands share: a bad value is a usage error (exit 2)."""

from __future__ import annotations

import argparse


def positive_int(value: str) -> int:
    number = _integer(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return number


def port_number(value: str) -> int:
    number = _integer(value)
    if not 1 <= number <= 65_535:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535, got {value}")
    return number


def _integer(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
