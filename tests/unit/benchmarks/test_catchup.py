"""The catch-up and batch-cost stages' figures, from batch results (no services)."""

from __future__ import annotations

import pytest

from benchmarks.catchup import batch_cost, catchup_details
from benchmarks.checks import build_checks
from benchmarks.figures import Measurement
from spark_jobs.store.runs import BatchResult


def result(records: int, seconds: dict[str, float], continued: int = 0) -> BatchResult:
    return BatchResult("ingest:t", 0, [], records, records, 0, 0, 0, 0, skipped=False, seconds=seconds,
                       sessions_continued=continued)  # fmt: skip


def test_the_catch_up_compares_the_medians_of_its_last_four_batches_with_its_first_four() -> None:
    times = [4.0, 5.0, 4.5, 4.8, 5.0, 5.2, 5.1, 6.0, 6.2, 5.9, 6.1]
    results = [result(100, {"parse": t - 1, "postgres": 1.0}, continued=50 * (i > 0)) for i, t in enumerate(times)]
    details = catchup_details(results, 100, continuing=True)
    assert details["batch_seconds"] == times
    assert (details["first_median_seconds"], details["last_median_seconds"]) == (4.65, 6.05)
    assert details["sessions_continued"][0] == 0 and details["sessions_continued"][-1] == 50
    cu = Measurement("CU", "catch-up", 1100, details=details)
    [check] = [c for c in build_checks({"CU": cu}) if c.row == "CU"]
    assert check.value == pytest.approx(6.05 / 4.65) and check.passed is False  # 1.30 > 1.3 by a hair


def test_a_batchs_fixed_seconds_and_seconds_per_million_are_the_fits_intercept_and_slope() -> None:
    points = [(100_000, 5.0), (50_000, 3.5), (50_000, 3.5), (25_000, 2.75), (25_000, 2.75)]
    cost = batch_cost(points)
    assert (cost["fixed_seconds"], cost["seconds_per_million"]) == (pytest.approx(2.0), pytest.approx(30.0))
    assert batch_cost([(10, 1.0), (10, 2.0)])["fixed_seconds"] is None  # one size: no line
