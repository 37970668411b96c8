"""The PostgreSQL side: sessions made equal to a recompute, through COPY into staging tables.

Called on the cursor of the batch's transaction, which also carries the ledger row, so the
sessions and the ledger commit together or not at all.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs.contract import SESSION_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

QUERIES = Path(__file__).parent / "sql"
# The text form of a session row that sinks.delta.SESSION_ROW_TEXT gives in Spark, and its checksum.
SESSION_ROW_TEXT = (
    "concat_ws('|', session_id, entity_id, to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS'), "
    "to_char(ended_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS'), "
    "to_char(first_event_time AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS'), "
    "to_char(last_event_time AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS'), event_count, "
    "duration_seconds::numeric(18,3))"
)
SESSIONS_CHECKSUM = (
    f"coalesce(sum(('x' || substr(encode(sha256(convert_to({SESSION_ROW_TEXT}, 'UTF8')), 'hex'), 1, 15))"
    "::bit(60)::bigint::numeric), 0)"
)


def rows_as_text(df: DataFrame, columns: tuple[str, ...]) -> list[tuple]:
    """``df``'s rows, streamed to the driver, with timestamps as text PostgreSQL reads (UTC offset included)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    types = {f.name: f.dataType for f in df.schema.fields}
    formatted = df.select(
        *[
            F.date_format(c, "yyyy-MM-dd HH:mm:ss.SSSSSSXXX").alias(c) if isinstance(types[c], TimestampType) else c
            for c in columns
        ]
    )
    return [tuple(row) for row in formatted.toLocalIterator()]


def copy_rows(cur, table: str, columns: tuple[str, ...], rows: list[tuple]) -> None:  # noqa: ANN001 - psycopg2 cursor
    """COPY ``rows`` into ``table`` in CSV, which round-trips any text.

    Strings are quoted (tabs, newlines, quotes, backslashes and ``\\N`` stay what they are);
    None is written unquoted and empty, which CSV COPY reads as NULL.
    """
    if not rows:
        return
    buffer = io.StringIO()
    csv.writer(buffer, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n").writerows(rows)
    buffer.seek(0)
    cur.copy_expert(f"COPY {table} ({', '.join(columns)}) FROM STDIN WITH (FORMAT csv)", buffer)


def upsert_sessions(cur, rows: list[tuple], anchors: list[tuple]) -> tuple[int, int]:  # noqa: ANN001
    """Make the sessions of the ``anchors`` entities, from each anchor on, equal ``rows``.

    ``rows`` (SESSION_COLUMNS order) are COPYed to staging and upserted; sessions of those entities
    that start at or after the entity's anchor and are not in ``rows`` are deleted. Returns
    (rows inserted or changed, rows deleted); both are 0 when PostgreSQL already matched.
    """
    cur.execute("CREATE TEMP TABLE IF NOT EXISTS sessions_staging (LIKE sessions INCLUDING DEFAULTS) ON COMMIT DROP")
    cur.execute(
        "CREATE TEMP TABLE IF NOT EXISTS session_anchors (entity_id text PRIMARY KEY, anchor timestamptz NOT NULL) "
        "ON COMMIT DROP"
    )
    copy_rows(cur, "sessions_staging", SESSION_COLUMNS, rows)
    copy_rows(cur, "session_anchors", ("entity_id", "anchor"), anchors)
    written = 0
    if rows:
        cur.execute((QUERIES / "upsert_sessions.sql").read_text())
        written = cur.rowcount
    cur.execute((QUERIES / "delete_replaced_sessions.sql").read_text())
    return written, cur.rowcount


def sessions_summary(cur) -> tuple[int, int]:  # noqa: ANN001
    """Row count and checksum of PostgreSQL ``sessions`` (comparable with sinks.delta.sessions_summary)."""
    cur.execute(f"SELECT count(*), {SESSIONS_CHECKSUM} FROM sessions")
    n, checksum = cur.fetchone()
    return int(n), int(checksum)
