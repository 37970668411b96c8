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

    The lock is tied to this connection, so a run that dies releases it.
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
        yield
    finally:
        conn.close()
