"""What one reconcile run checks against: the ledger, what was verified, the previous run and
PostgreSQL's sessions, all as of one ``REPEATABLE READ`` snapshot taken under the lake lock."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from spark_jobs.sinks import postgres
from spark_jobs.store import history, ledger, verified
from spark_jobs.store.findings import SessionsSummary
from spark_jobs.store.open_findings import OpenFinding, read_open
from spark_jobs.store.verified import NOT_CHECKED, LedgerRange, Verified


@dataclass
class Snapshot:
    """What one run checks: the Delta versions and the ledger as of the lake lock, and the previous run."""

    versions: dict[str, int]  # each table's version, read while the lake lock was held
    ranges: list[LedgerRange]
    verified: dict[tuple[str, int, str, int], Verified]
    previous_versions: dict[str, int] | None
    previous_delta_sessions: SessionsSummary | None
    previous_at: datetime | None
    postgres_sessions: SessionsSummary
    now: datetime
    previous_buckets: dict[str, tuple[int, int]] | None = None  # Delta sessions per entity bucket, then
    to_check: list[tuple[LedgerRange, str]] = field(default_factory=list)
    open_findings: list[OpenFinding] = field(default_factory=list)  # of earlier runs, not closed


def snapshot_time(cur) -> datetime:
    """The database's ``now()``: the transaction's first query, which fixes a ``REPEATABLE READ``
    snapshot (so call it while the lake lock is held)."""
    cur.execute("SELECT now()")
    return cur.fetchone()[0]


def read_snapshot(cur, versions: dict[str, int], now: datetime) -> Snapshot:
    """The ledger's ranges, what was verified, the previous run and PostgreSQL's sessions, as of the
    transaction's snapshot; ``to_check`` is left for the run to decide."""
    ranges = [LedgerRange(p, b, r) for p, b, r in ledger.checked_ranges(cur, NOT_CHECKED)]
    previous = history.previous_run(cur)
    return Snapshot(
        versions=versions,
        ranges=ranges,
        verified=verified.verified_ranges(cur),
        previous_versions=previous.versions if previous else None,
        previous_delta_sessions=previous.delta_sessions if previous else None,
        previous_at=previous.counted_at if previous else None,
        postgres_sessions=SessionsSummary(*postgres.sessions_summary(cur)),
        now=now,
        previous_buckets=previous.buckets if previous else None,
        open_findings=read_open(cur),
    )
