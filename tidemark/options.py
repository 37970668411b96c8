"""argparse value types the ``tidemark`` commands share (the CLI and the benchmark)."""

from __future__ import annotations

import argparse


def fraction(text: str) -> float:
    """A number in [0, 1]."""
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction between 0 and 1")
    return value


def positive(text: str) -> int:
    """A whole number of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be a positive whole number")
    return value


def non_negative(text: str) -> int:
    """A whole number of at least 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be zero or more")
    return value
