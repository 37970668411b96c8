"""Reconciliation's ranges, pure: the rotation that re-checks verified ranges."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spark_jobs.offsets import PartitionRange
from spark_jobs.reconcile.ranges import rotation_share
from spark_jobs.settings import Settings
from spark_jobs.store.verified import LedgerRange, Verified


def test_the_rotation_rechecks_a_share_of_verified_ranges_and_everything_overdue(tmp_path) -> None:
    now = datetime(2026, 11, 21, 12, tzinfo=UTC)
    settings = Settings.from_env({"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_REVERIFY_DAYS": "7"})
    ranges = [LedgerRange("ingest:t", i, PartitionRange("t", 0, i * 10, i * 10 + 10)) for i in range(14)]
    checked = [now - timedelta(days=1, hours=i) for i in range(14)]
    verified = {(r.pipeline, r.batch_id, "t", 0): Verified(10, 1, at) for r, at in zip(ranges, checked, strict=True)}
    # Runs every hour: 14 ranges over 7 days is less than one per run, nothing is due yet.
    assert rotation_share(ranges, verified, now - timedelta(hours=1), now, settings) == []
    # A day since the last run: a seventh of them, the least recently checked first.
    assert rotation_share(ranges, verified, now - timedelta(days=1), now, settings) == [ranges[13], ranges[12]]
    # Whatever the share, a range not re-checked for a whole period is due.
    stale = dict(verified) | {("ingest:t", 4, "t", 0): Verified(10, 1, now - timedelta(days=8))}
    assert rotation_share(ranges, stale, now - timedelta(hours=1), now, settings) == [ranges[4]]
