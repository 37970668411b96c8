"""The reconcile history store: every statement on ``reconcile_runs``, ``reconcile_ranges``,
``reconcile_lag``, ``verified_ranges`` and ``repairs``.

A run reads its predecessor and what was verified (:func:`read_snapshot`) and records itself
(:func:`record_run`); a repair reads a run's findings and records what it did; the Airflow
verdict, the tidemark page, ``tidemark reconcile --show`` and maintenance read or prune the same
tables here. Every function takes a psycopg2 cursor: the caller opens the transaction
(``spark_jobs.db.transaction``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from spark_jobs import ledger
from spark_jobs.offsets import PartitionRange
from spark_jobs.reconcile.findings import MOVED, SessionsSummary
from spark_jobs.reconcile.open_findings import GAP, RANGE, FollowUp, OpenFinding, kind_of, range_key
from spark_jobs.reconcile.ranges import NOT_CHECKED, LedgerRange, Verified
from spark_jobs.sinks import postgres

if TYPE_CHECKING:
    from spark_jobs.reconcile.findings import Report


# ---------------------------------------------------------------------------------------------
# A run: its snapshot and its record


@dataclass
class Snapshot:
    """What one run checks: the Delta versions and the ledger as of the lake lock, and the previous run."""

    versions: dict[str, int] | None  # None: not readable without Spark (a remote lake)
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


def verified_ranges(cur) -> dict[tuple[str, int, str, int], Verified]:
    """The count and checksum each verified range was verified with, and the batches that moved
    rows of it since (:func:`mark_moved`), by :func:`ranges.key`."""
    cur.execute(
        """SELECT v.pipeline, v.batch_id, v.topic, v.kafka_partition, v.sink_records, v.sink_checksum, v.checked_at,
                  coalesce(array_agg(ARRAY[m.moved_by_pipeline, m.moved_by_batch::text])
                           FILTER (WHERE m.moved_by_pipeline IS NOT NULL), '{}')
           FROM verified_ranges AS v
           LEFT JOIN range_moves AS m USING (pipeline, batch_id, topic, kafka_partition)
           GROUP BY 1, 2, 3, 4, 5, 6, 7"""
    )
    return {
        (p, b, t, k): Verified(int(n), int(c), at, frozenset((mp, int(mb)) for mp, mb in moves))
        for p, b, t, k, n, c, at, moves in cur.fetchall()
    }


def mark_moved(cur, spans: list[PartitionRange], pipeline: str, batch_id: int) -> None:
    """Mark the verified ranges that hold rows at ``spans`` as moved by ``pipeline``'s batch
    ``batch_id`` (call before the batch's first Delta write, in a transaction that commits then):
    reconcile re-checks them by count and offsets and takes their new checksum as the baseline."""
    cur.executemany(
        """INSERT INTO range_moves (pipeline, batch_id, topic, kafka_partition, moved_by_pipeline, moved_by_batch)
           SELECT pipeline, batch_id, topic, kafka_partition, %s, %s FROM verified_ranges
           WHERE topic = %s AND kafka_partition = %s AND start_offset < %s AND end_offset > %s
           ON CONFLICT DO NOTHING""",
        [(pipeline, batch_id, s.topic, s.partition, s.end, s.start) for s in spans],
    )


def read_snapshot(cur, versions: dict[str, int] | None, now: datetime) -> Snapshot:
    """The ledger's ranges, what was verified, the previous run and PostgreSQL's sessions, as of the
    transaction's snapshot; ``to_check`` is left for the run to decide."""
    ranges = [LedgerRange(p, b, r) for p, b, r in ledger.checked_ranges(cur, NOT_CHECKED)]
    verified = verified_ranges(cur)
    cur.execute(
        """SELECT delta_versions, delta_sessions, delta_sessions_checksum, counted_at, delta_session_buckets
           FROM reconcile_runs
           WHERE status IN ('ok', 'mismatch') AND delta_versions IS NOT NULL
           ORDER BY counted_at DESC LIMIT 1"""
    )
    row = cur.fetchone()
    previous_versions, previous_sessions, previous_at, previous_buckets = None, None, None, None
    if row is not None:
        previous_versions, previous_at = row[0], row[3]
        previous_sessions = SessionsSummary(int(row[1]), int(row[2]))
        if row[4] is not None:
            previous_buckets = {b: (int(n), int(c)) for b, (n, c) in row[4].items()}
    return Snapshot(
        versions=versions,
        ranges=ranges,
        verified=verified,
        previous_versions=previous_versions,
        previous_delta_sessions=previous_sessions,
        previous_at=previous_at,
        postgres_sessions=SessionsSummary(*postgres.sessions_summary(cur)),
        now=now,
        previous_buckets=previous_buckets,
        open_findings=open_findings(cur),
    )


def record_run(
    cur,
    report: Report,
    snapshot: Snapshot,
    buckets: dict[str, tuple[int, int]] | None,
    repair_of: str | None,
    follow: FollowUp,
) -> None:
    """Write (or, for a retried task, rewrite) this run's rows, what it verified, and what it did
    with the open findings (``follow``)."""
    run_id = report.run_id
    cur.execute("DELETE FROM reconcile_runs WHERE run_id = %s", (run_id,))
    cur.execute(
        """INSERT INTO reconcile_runs (run_id, counted_at, finished_at, status, delta_sessions,
                                       delta_sessions_checksum, postgres_sessions, postgres_sessions_checksum,
                                       ranges_checked, ranges_mismatched, gaps, report, delta_versions, used_spark,
                                       entities_checked, findings, repair_of, alert, snapshot_seconds,
                                       delta_session_buckets, open_findings, opened_findings)
           VALUES (%s, %s, clock_timestamp(), %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,
                   %s, %s)""",
        (
            run_id,
            snapshot.now,
            report.status,
            report.delta_sessions.count,
            report.delta_sessions.checksum,
            report.postgres_sessions.count,
            report.postgres_sessions.checksum,
            len(report.checks),
            len(report.mismatched),
            json.dumps([g.as_dict() for g in report.gaps]),
            report.summary(),
            json.dumps(snapshot.versions),
            report.used_spark,
            report.entities_checked,
            json.dumps(report.findings()),
            repair_of,
            None if report.ok else report.alert(),
            report.snapshot_seconds,
            None if buckets is None else json.dumps({b: [n, str(c)] for b, (n, c) in sorted(buckets.items())}),
            follow.open_count,
            len(follow.opened),
        ),
    )
    _record_findings(cur, run_id, follow)
    cur.executemany(
        """INSERT INTO reconcile_ranges (run_id, pipeline, batch_id, topic, kafka_partition, start_offset,
                                         end_offset, sink_records, sink_checksum, kafka_records, matches, reason,
                                         outcome)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
        [
            (
                run_id,
                c.pipeline,
                c.batch_id,
                c.topic,
                c.partition,
                c.start,
                c.end,
                c.sink_records,
                c.sink_checksum,
                c.kafka_records,
                c.matches,
                c.reason,
                c.outcome,
            )  # fmt: skip
            for c in report.checks
        ],
    )
    cur.executemany(
        """INSERT INTO reconcile_lag (run_id, topic, kafka_partition, high_watermark, processed_to, behind_records,
                                      oldest_unprocessed, behind_seconds)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s)""",
        [
            (
                run_id,
                g.topic,
                g.partition,
                g.high_watermark,
                g.processed_to,
                g.behind_records,
                g.oldest_unprocessed,
                g.behind_seconds,
            )  # fmt: skip
            for g in report.lags
        ],
    )
    cur.executemany(
        """INSERT INTO verified_ranges (pipeline, batch_id, topic, kafka_partition, start_offset, end_offset,
                                        sink_records, sink_checksum, verified_by)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
           ON CONFLICT (pipeline, batch_id, topic, kafka_partition) DO UPDATE SET checked_at = now()""",
        [
            (c.pipeline, c.batch_id, c.topic, c.partition, c.start, c.end, c.sink_records, c.sink_checksum, run_id)
            for c in report.checks
            if c.baseline and c.reason != MOVED
        ],
    )
    # Ranges recorded batches moved rows of: what they hold now is the baseline. A mark goes once
    # the batch that set it is in the snapshot's ledger (all its Delta writes are in the snapshot).
    moved = [c for c in report.checks if c.matches and c.reason == MOVED]
    cur.executemany(
        """UPDATE verified_ranges SET sink_records = %s, sink_checksum = %s, verified_by = %s, checked_at = now()
           WHERE pipeline = %s AND batch_id = %s AND topic = %s AND kafka_partition = %s""",
        [(c.sink_records, c.sink_checksum, run_id, c.pipeline, c.batch_id, c.topic, c.partition) for c in moved],
    )
    committed = {(r.pipeline, r.batch_id) for r in snapshot.ranges}
    cur.executemany(
        """DELETE FROM range_moves WHERE pipeline = %s AND batch_id = %s AND topic = %s AND kafka_partition = %s
           AND moved_by_pipeline = %s AND moved_by_batch = %s""",
        [
            (c.pipeline, c.batch_id, c.topic, c.partition, mp, mb)
            for c in moved
            for mp, mb in snapshot.verified[(c.pipeline, c.batch_id, c.topic, c.partition)].moved_by
            if (mp, mb) in committed
        ],
    )


def _record_findings(cur, run_id: str, follow: FollowUp) -> None:
    cur.executemany(
        """INSERT INTO findings (finding_key, kind, finding, opened_by, seen_by) VALUES (%s, %s, %s, %s, %s)""",
        [(key, kind_of(f), json.dumps(f), run_id, run_id) for key, f in follow.opened],
    )
    cur.executemany(
        "UPDATE findings SET finding = %s, seen_by = %s WHERE finding_id = %s",
        [(json.dumps(f), run_id, o.finding_id) for o, f in follow.seen + follow.carried],
    )
    cur.executemany(
        "UPDATE findings SET closed_by = %s, closed_at = now(), closed_why = %s WHERE finding_id = %s",
        [(run_id, why, o.finding_id) for o, why in follow.closed],
    )


# ---------------------------------------------------------------------------------------------
# Open findings

_FINDING = "finding_id, finding_key, finding, opened_by, opened_at"


def open_findings(cur) -> list[OpenFinding]:
    """The findings no check closed and no operator acknowledged, oldest first."""
    cur.execute(f"SELECT {_FINDING} FROM findings WHERE closed_at IS NULL ORDER BY finding_id")
    return [OpenFinding(*row) for row in cur.fetchall()]


def recent_findings(cur, limit: int) -> list[tuple]:
    """The open findings and the latest closed ones, up to ``limit``, open first then newest:
    (finding_id, finding, opened_by, opened_at, seen_by, closed_by, closed_at, closed_why)."""
    cur.execute(
        """SELECT finding_id, finding, opened_by, opened_at, seen_by, closed_by, closed_at, closed_why
           FROM findings ORDER BY closed_at IS NOT NULL, finding_id DESC LIMIT %s""",
        (limit,),
    )
    return cur.fetchall()


def acknowledge(cur, finding_ids: list[int], who: str, reason: str) -> list[OpenFinding]:
    """Close the open findings ``finding_ids`` as acknowledged by ``who`` for ``reason``; the ones closed.
    Raises ``ConfigError`` naming the ids that are not open (and closes none)."""
    from spark_jobs.errors import ConfigError

    cur.execute(
        f"SELECT {_FINDING} FROM findings WHERE closed_at IS NULL AND finding_id = ANY(%s) ORDER BY finding_id",
        (finding_ids,),
    )
    found = [OpenFinding(*row) for row in cur.fetchall()]
    missing = sorted(set(finding_ids) - {f.finding_id for f in found})
    if missing:
        raise ConfigError(
            f"no open finding {', '.join(f'#{i}' for i in missing)}: `tidemark findings` lists the open ones"
        )
    cur.execute(
        """UPDATE findings SET closed_by = %s, closed_at = now(), closed_why = %s
           WHERE finding_id = ANY(%s)""",
        (f"acknowledged by {who}", f"acknowledged: {reason}", finding_ids),
    )
    # What the sinks hold of an acknowledged range is taken as it is: its next check sets a new
    # baseline (against Kafka; expired when retention removed its start). An acknowledged gap is
    # an acknowledged loss, reported by every run as such and no gap any more.
    ranges = [f.finding for f in found if f.kind == RANGE]
    cur.executemany(
        "DELETE FROM verified_ranges WHERE pipeline = %s AND batch_id = %s AND topic = %s AND kafka_partition = %s",
        [range_key(f) for f in ranges],
    )
    gaps = [f.finding for f in found if f.kind == GAP]
    cur.executemany(
        """INSERT INTO retention_losses (pipeline, topic, kafka_partition, start_offset, end_offset, before_first_run)
           VALUES (%s, %s, %s, %s, %s, false) ON CONFLICT DO NOTHING""",
        [(g["pipeline"], g["topic"], g["partition"], g["start"], g["end"]) for g in gaps],
    )
    return found


# ---------------------------------------------------------------------------------------------
# Reading a run back


def run_report(cur, run_id: str) -> tuple[str, str, str] | None:
    """(run_id, status, report) of run ``run_id``, None when there is no such run."""
    cur.execute("SELECT run_id, status, report FROM reconcile_runs WHERE run_id = %s", (run_id,))
    return cur.fetchone()


def stored_report(cur, run_id: str | None = None) -> tuple[str, str, str] | None:
    """(run_id, status, report) of ``run_id``, or of the latest run."""
    if run_id:
        return run_report(cur, run_id)
    cur.execute("SELECT run_id, status, report FROM reconcile_runs ORDER BY counted_at DESC LIMIT 1")
    return cur.fetchone()


def run_ranges(cur, run_id: str) -> list[tuple]:
    """The ranges run ``run_id`` checked, by partition and offset: (topic, kafka_partition,
    start_offset, end_offset, pipeline, batch_id, reason, sink_records, kafka_records, outcome)."""
    cur.execute(
        """SELECT topic, kafka_partition, start_offset, end_offset, pipeline, batch_id, reason, sink_records,
                  kafka_records, outcome
           FROM reconcile_ranges WHERE run_id = %s ORDER BY topic, kafka_partition, start_offset""",
        (run_id,),
    )
    return cur.fetchall()


def run_verdict(cur, run_id: str) -> tuple | None:
    """(status, report, alert, ranges_checked, used_spark, opened_findings) of run ``run_id``, None
    when there is no such run."""
    cur.execute(
        """SELECT status, report, alert, ranges_checked, used_spark, opened_findings
           FROM reconcile_runs WHERE run_id = %s""",
        (run_id,),
    )
    return cur.fetchone()


def run_findings(cur, run_id: str | None) -> tuple[str, str, list[dict] | None] | None:
    """(run_id, status, findings) of ``run_id``, or of the latest run that found a mismatch."""
    if run_id:
        cur.execute("SELECT run_id, status, findings FROM reconcile_runs WHERE run_id = %s", (run_id,))
    else:
        cur.execute(
            "SELECT run_id, status, findings FROM reconcile_runs WHERE status = 'mismatch' "
            "ORDER BY counted_at DESC LIMIT 1"
        )
    return cur.fetchone()


# ---------------------------------------------------------------------------------------------
# Repairs


def record_repair(cur, repair_id: str, run_id: str, actions: list[str], recheck: str | None, status: str) -> None:
    """Write (or update) repair ``repair_id`` of run ``run_id``: its actions so far, its re-check run and status."""
    cur.execute(
        """INSERT INTO repairs (repair_id, reconcile_run, actions, recheck_run, status)
           VALUES (%s, %s, %s, %s, %s)
           ON CONFLICT (repair_id) DO UPDATE SET actions = EXCLUDED.actions,
               recheck_run = EXCLUDED.recheck_run, status = EXCLUDED.status,
               finished_at = CASE WHEN EXCLUDED.status = 'running' THEN NULL ELSE now() END""",
        (repair_id, run_id, json.dumps(actions), recheck, status),
    )


def repair_recheck(cur, repair_id: str) -> tuple[str | None, list[str]] | None:
    """(recheck_run, actions) of repair ``repair_id``, None when there is no such repair."""
    cur.execute("SELECT recheck_run, actions FROM repairs WHERE repair_id = %s", (repair_id,))
    return cur.fetchone()


# ---------------------------------------------------------------------------------------------
# The tidemark page's history


def recent_runs(cur, limit: int) -> list[tuple]:
    """The latest ``limit`` runs, newest first: (run_id, counted_at, status, ranges_checked,
    ranges_mismatched, used_spark, entities_checked, repair_of, the run's largest lag in seconds)."""
    cur.execute(
        """SELECT r.run_id, r.counted_at, r.status, r.ranges_checked, r.ranges_mismatched, r.used_spark,
                  r.entities_checked, r.repair_of,
                  (SELECT max(l.behind_seconds) FROM reconcile_lag AS l WHERE l.run_id = r.run_id)
           FROM reconcile_runs AS r ORDER BY r.counted_at DESC LIMIT %s""",
        (limit,),
    )
    return cur.fetchall()


# Lag as reconcile runs measured it and as scheduled ingest runs left it (spark_jobs.runs), one sample per
# run and partition: (at, topic, kafka_partition, behind_records, behind_seconds, processed_to, high_watermark).
LAG_SAMPLES = """
    SELECT r.counted_at AS at, l.topic, l.kafka_partition, l.behind_records, l.behind_seconds, l.processed_to,
           l.high_watermark
    FROM reconcile_lag AS l JOIN reconcile_runs AS r USING (run_id)
    UNION ALL
    SELECT i.finished_at, l.topic, l.kafka_partition, l.behind_records, l.behind_seconds, l.processed_to,
           l.high_watermark
    FROM ingest_lag AS l JOIN ingest_runs AS i USING (run_id)"""


def recent_lag(cur, limit: int) -> list[tuple]:
    """The lag samples of the latest ``limit`` runs that measured lag (reconcile or scheduled ingest),
    oldest first: (at, topic, kafka_partition, behind_records, behind_seconds, processed_to, high_watermark)."""
    cur.execute(
        f"""WITH samples AS ({LAG_SAMPLES})
            SELECT * FROM samples
            WHERE at >= (SELECT min(at) FROM (SELECT DISTINCT at FROM samples ORDER BY at DESC LIMIT %s) AS latest)
            ORDER BY at, topic, kafka_partition""",
        (limit,),
    )
    return cur.fetchall()


def coverage(cur) -> list[tuple]:
    """Per partition of the checked ledger: (topic, kafka_partition, ledger offsets, verified offsets,
    ranges, verified ranges, open findings). Offsets are counted once however many ranges hold them
    (a replay, a backfill or a repair reads offsets again). A verified range with an open finding is
    not counted as verified until the finding is closed."""
    cur.execute(
        """WITH open_ranges AS (
               SELECT finding->>'pipeline' AS pipeline, (finding->>'batch_id')::bigint AS batch_id,
                      finding->>'topic' AS topic, (finding->>'partition')::integer AS kafka_partition
               FROM findings WHERE closed_at IS NULL AND kind = 'range'),
           open_per_partition AS (
               SELECT finding->>'topic' AS topic, (finding->>'partition')::integer AS kafka_partition, count(*) AS n
               FROM findings WHERE closed_at IS NULL AND finding ? 'partition' GROUP BY 1, 2),
           ranges AS (
               SELECT l.topic, l.kafka_partition, int8range(l.start_offset, l.end_offset) AS offsets,
                      v.pipeline IS NOT NULL AND o.pipeline IS NULL AS verified
               FROM ledger_ranges AS l
               LEFT JOIN verified_ranges AS v USING (pipeline, batch_id, topic, kafka_partition)
               LEFT JOIN open_ranges AS o USING (pipeline, batch_id, topic, kafka_partition)
               WHERE l.pipeline <> 'land'),
           per_partition AS (
               SELECT topic, kafka_partition, range_agg(offsets) AS offsets,
                      range_agg(offsets) FILTER (WHERE verified) AS verified_offsets,
                      count(*) AS ranges, count(*) FILTER (WHERE verified) AS verified_ranges
               FROM ranges GROUP BY 1, 2)
           SELECT p.topic, p.kafka_partition,
                  (SELECT coalesce(sum(upper(r) - lower(r)), 0)::bigint FROM unnest(p.offsets) AS r),
                  (SELECT coalesce(sum(upper(r) - lower(r)), 0)::bigint FROM unnest(p.verified_offsets) AS r),
                  p.ranges, p.verified_ranges, coalesce(o.n, 0)
           FROM per_partition AS p LEFT JOIN open_per_partition AS o USING (topic, kafka_partition)
           ORDER BY 1, 2"""
    )
    return cur.fetchall()


def latest_findings(cur) -> list[tuple]:
    """The latest 10 runs that did not pass, with their repair: (run_id, counted_at, status, alert,
    repair_id, repair status, recheck_run)."""
    cur.execute(
        """SELECT r.run_id, r.counted_at, r.status, r.alert, p.repair_id, p.status, p.recheck_run
           FROM reconcile_runs AS r LEFT JOIN repairs AS p ON p.reconcile_run = r.run_id
           WHERE r.status <> 'ok' ORDER BY r.counted_at DESC LIMIT 10"""
    )
    return cur.fetchall()


def latest_verdict(cur) -> tuple | None:
    """(run_id, status, counted_at) of the latest run, None before the first."""
    cur.execute("SELECT run_id, status, counted_at FROM reconcile_runs ORDER BY counted_at DESC LIMIT 1")
    return cur.fetchone()


def open_findings_by_kind(cur) -> dict[str, int]:
    """How many findings of each kind are open."""
    cur.execute("SELECT kind, count(*) FROM findings WHERE closed_at IS NULL GROUP BY 1")
    return dict(cur.fetchall())


# ---------------------------------------------------------------------------------------------
# Pruning


def prune(cur, history_days: float) -> int:
    """Delete reconcile runs older than ``history_days`` (their ranges, lags and repairs go with
    them), keeping the latest run, which the next reconcile compares itself with; how many."""
    cur.execute(
        """DELETE FROM reconcile_runs
           WHERE counted_at < now() - %s * interval '1 day'
             AND run_id <> (SELECT run_id FROM reconcile_runs ORDER BY counted_at DESC LIMIT 1)""",
        (history_days,),
    )
    pruned = cur.rowcount
    cur.execute("DELETE FROM findings WHERE closed_at < now() - %s * interval '1 day'", (history_days,))
    # The ingest runs' history (spark_jobs.runs) is kept as long.
    cur.execute("DELETE FROM ingest_runs WHERE finished_at < now() - %s * interval '1 day'", (history_days,))
    return pruned
