"""The PostgreSQL side: sessions made equal to a recompute, through COPY into staging tables.

Called on the cursor of the batch's transaction, which also carries the ledger row, so the
sessions and the ledger commit together or not at all.
"""

from __future__ import annotations

import csv
import io
import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs.contract import SESSION_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

QUERIES = Path(__file__).parent / "sql"
# How many stored sessions one pass over ``sessions`` reads in the time one anchor's lookup takes.
SCAN_SESSIONS_PER_ANCHOR = 16
# The text form of a session row that sinks.delta.SESSION_ROW_TEXT gives in Spark, and its checksum.
SESSION_ROW_TEXT = (
    "concat_ws('|', session_id, entity_id, to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), "
    "to_char(ended_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), "
    "to_char(first_event_time AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), "
    "to_char(last_event_time AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), event_count, "
    "duration_seconds::numeric(18,6))"
)
SESSIONS_CHECKSUM = (
    f"coalesce(sum(('x' || substr(encode(sha256(convert_to({SESSION_ROW_TEXT}, 'UTF8')), 'hex'), 1, 15))"
    "::bit(60)::bigint::numeric), 0)"
)


def text_rows(df: DataFrame, columns: tuple[str, ...]) -> Iterator[tuple]:
    """``df``'s rows, streamed to the driver a partition at a time, with timestamps as text PostgreSQL
    reads (UTC offset included). Nothing holds them all: a batch's sessions never need to fit in the
    driver's memory."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    types = {f.name: f.dataType for f in df.schema.fields}
    formatted = df.select(
        *[
            F.date_format(c, "yyyy-MM-dd HH:mm:ss.SSSSSSXXX").alias(c) if isinstance(types[c], TimestampType) else c
            for c in columns
        ]
    )
    return (tuple(row) for row in formatted.toLocalIterator())


def pulled(sessions: DataFrame, anchors: DataFrame) -> tuple[list[tuple], Iterator[tuple]]:
    """What :func:`upsert_sessions` takes, in one pull from Spark (one query): the ``anchors``
    ``(entity_id, anchor)``, collected (one row per entity), and the ``sessions`` (SESSION_COLUMNS),
    streamed after them. The anchors come first as rows without a session_id: a union keeps its
    inputs' partitions in order, and the driver pulls them in that order."""
    from pyspark.sql import functions as F

    marked = anchors.select(
        F.lit(None).cast("string").alias("session_id"), "entity_id", F.col("anchor").alias("started_at")
    )
    rows = text_rows(marked.unionByName(sessions.select(*SESSION_COLUMNS), allowMissingColumns=True), SESSION_COLUMNS)
    anchor_rows: list[tuple] = []
    for row in rows:
        if row[0] is not None:
            return anchor_rows, _sessions_only(itertools.chain([row], rows))
        anchor_rows.append((row[1], row[2]))
    return anchor_rows, iter(())


def _sessions_only(rows: Iterator[tuple]) -> Iterator[tuple]:
    for row in rows:
        if row[0] is None:  # Spark pulled partitions out of order: a bug, not an input
            raise RuntimeError("an anchor row came after session rows in the pull to PostgreSQL")
        yield row


def rows_as_text(df: DataFrame, columns: tuple[str, ...]) -> list[tuple]:
    """:func:`text_rows` as a list (for rows that are used more than once)."""
    return list(text_rows(df, columns))


class _CsvStream:
    """A file-like ``read`` over rows, encoded as CSV on demand, for ``copy_expert``."""

    def __init__(self, rows: Iterable[tuple]) -> None:
        self._rows = iter(rows)
        self._buffer = io.StringIO()
        self._writer = csv.writer(self._buffer, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
        self.count = 0

    def read(self, size: int = -1) -> str:
        want = size if size and size > 0 else 1 << 20
        while self._buffer.tell() < want:
            row = next(self._rows, None)
            if row is None:
                break
            self._writer.writerow(row)
            self.count += 1
        chunk = self._buffer.getvalue()
        self._buffer.seek(0)
        self._buffer.truncate()
        return chunk


def copy_rows(cur, table: str, columns: tuple[str, ...], rows: Iterable[tuple]) -> int:
    """COPY ``rows`` into ``table`` in CSV, which round-trips any text; returns how many.

    ``rows`` are encoded as COPY reads them, so an iterator is never held whole. Strings are quoted
    (tabs, newlines, quotes, backslashes and ``\\N`` stay what they are); None is written unquoted
    and empty, which CSV COPY reads as NULL.
    """
    stream = _CsvStream(rows)
    cur.copy_expert(f"COPY {table} ({', '.join(columns)}) FROM STDIN WITH (FORMAT csv)", stream)
    return stream.count


def upsert_sessions(
    cur, rows: Iterable[tuple], anchors: Iterable[tuple], every_entity: bool = False
) -> tuple[int, int]:
    """Make the sessions of the ``anchors`` entities, from each anchor on, equal ``rows``.

    ``rows`` (SESSION_COLUMNS order) are COPYed to staging and upserted; sessions of those entities
    that start at or after the entity's anchor and are not in ``rows`` are deleted. With
    ``every_entity`` the anchors name every entity there is (a full rebuild): the sessions of any
    other entity are deleted too. Returns (rows inserted or changed, rows deleted); both are 0 when
    PostgreSQL already matched.
    """
    cur.execute("CREATE TEMP TABLE IF NOT EXISTS sessions_staging (LIKE sessions INCLUDING DEFAULTS) ON COMMIT DROP")
    cur.execute(
        "CREATE TEMP TABLE IF NOT EXISTS session_anchors (entity_id text PRIMARY KEY, anchor timestamptz NOT NULL) "
        "ON COMMIT DROP"
    )
    written = 0
    if copy_rows(cur, "sessions_staging", SESSION_COLUMNS, rows):
        cur.execute((QUERIES / "upsert_sessions.sql").read_text())
        written = cur.rowcount
    anchored = copy_rows(cur, "session_anchors", ("entity_id", "anchor"), anchors)
    cur.execute(replaced_sessions_delete(cur, anchored))
    deleted = cur.rowcount
    if every_entity:
        cur.execute((QUERIES / "delete_sessions_of_unknown_entities.sql").read_text())
        deleted += cur.rowcount
    return written, deleted


def replaced_sessions_delete(cur, anchors: int) -> str:
    """The statement that deletes the sessions a batch of ``anchors`` anchors replaced.

    A lookup per anchor through ``sessions_by_entity`` costs about what reading
    :data:`SCAN_SESSIONS_PER_ANCHOR` stored sessions costs (measured on PostgreSQL 15: even at
    5,000 anchors against 80,000 stored sessions, 500 against 10,000). A batch whose entities hold
    a small part of ``sessions`` looks its entities up; a first run or a rebuild, whose anchors
    cover most of the table, reads it once. The planner cannot make this choice itself: it
    guesses that a third of an entity's sessions start after its anchor. Its estimate of the
    table's rows (its statistics scaled to the table's current size) is enough to make it here.
    """
    cur.execute("EXPLAIN (FORMAT JSON) SELECT 1 FROM sessions")
    stored = cur.fetchone()[0][0]["Plan"]["Plan Rows"]
    by = "entity" if stored > anchors * SCAN_SESSIONS_PER_ANCHOR else "scan"
    return (QUERIES / f"delete_replaced_sessions_by_{by}.sql").read_text()


def sessions_summary(cur) -> tuple[int, int]:
    """Row count and checksum of PostgreSQL ``sessions`` (comparable with sinks.delta.sessions_summary)."""
    cur.execute(f"SELECT count(*), {SESSIONS_CHECKSUM} FROM sessions")
    n, checksum = cur.fetchone()
    return int(n), int(checksum)


# 256 buckets of entities: the same text in Spark SQL (reconcile.sessions reads Delta's by it).
SESSION_BUCKET = "substr(md5(entity_id), 1, 2)"


def session_buckets(cur) -> dict[str, tuple[int, int]]:
    """Per bucket of entities (:data:`SESSION_BUCKET`): (rows, checksum) of PostgreSQL ``sessions``."""
    cur.execute(f"SELECT {SESSION_BUCKET}, count(*), {SESSIONS_CHECKSUM} FROM sessions GROUP BY 1")
    return {b: (int(n), int(c)) for b, n, c in cur.fetchall()}


def session_row_hashes(cur, buckets: list[str]) -> dict[str, tuple[str, str]]:
    """session_id -> (entity_id, the first 15 hex digits of the SHA-256 of :data:`SESSION_ROW_TEXT`) of
    the sessions in ``buckets`` (what Spark computes from sinks.delta.SESSION_ROW_TEXT, to compare rows)."""
    cur.execute(
        f"""SELECT session_id, entity_id,
                   substr(encode(sha256(convert_to({SESSION_ROW_TEXT}, 'UTF8')), 'hex'), 1, 15)
            FROM sessions WHERE {SESSION_BUCKET} = ANY(%s)""",
        (buckets,),
    )
    return {session_id: (entity, h) for session_id, entity, h in cur.fetchall()}


def entity_sessions(cur, entity_id: str) -> list[tuple]:
    """(session_id, started_at, ended_at, event_count) of ``entity_id``'s sessions, oldest first."""
    cur.execute(
        """SELECT session_id, started_at, ended_at, event_count
           FROM sessions WHERE entity_id = %s ORDER BY started_at""",
        (entity_id,),
    )
    return cur.fetchall()
