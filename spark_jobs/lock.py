"""The single-writer lock: only one run writes a topic's sinks at a time."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from spark_jobs import ledger
from spark_jobs.errors import WriterBusy
from spark_jobs.settings import Settings


@contextmanager
def single_writer(settings: Settings, topic: str, wait: bool = False) -> Iterator[None]:
    """Hold the per-topic writer lock (a PostgreSQL advisory lock) for the duration of a run.

    The lock is released before this returns, so a retry started at once gets it; closing the
    connection alone frees it only once the server has handled the disconnect. A run that dies
    releases it with its connection.
    """
    conn = ledger.connect(settings.postgres_dsn)
    conn.autocommit = True
    key = f"tidemark-writer:{topic}"
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,))
            if not cur.fetchone()[0]:
                if not wait:
                    raise WriterBusy(
                        f"another tidemark run (scheduled ingest or backfill) is writing topic {topic!r}. "
                        "Only one may write at a time: wait for it to finish, or run with --wait to queue."
                    )
                cur.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
        try:
            yield
        finally:
            _unlock(conn, key)
    finally:
        conn.close()


def _unlock(conn, key: str) -> None:  # noqa: ANN001 - psycopg2 connection
    """Release at once; on a broken connection leave it to the close (the run's own error matters more)."""
    import psycopg2

    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))
    except psycopg2.Error:
        pass
