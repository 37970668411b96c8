"""PostgreSQL advisory locks: one writer per topic, and a consistent snapshot of the whole lake.

* :func:`single_writer`: only one run writes a topic's sinks at a time (held for the whole run).
* :func:`batch_commit` / :func:`lake_snapshot`: every batch holds the lake lock *shared* while it
  writes Delta and PostgreSQL; reconcile takes it *exclusive* for the moment it fixes the Delta
  versions and its PostgreSQL snapshot, so it sees every batch entirely or not at all, whatever
  topic is written. Writers wait at most that moment; reconcile waits at most one batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from spark_jobs import ledger
from spark_jobs.errors import WriterBusy
from spark_jobs.settings import Settings

LAKE_KEY = "tidemark-lake"


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


def _unlock(conn, key: str, kind: str = "") -> None:  # noqa: ANN001 - psycopg2 connection
    """Release at once; on a broken connection leave it to the close (the run's own error matters more)."""
    import psycopg2

    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT pg_advisory_unlock{kind}(hashtext(%s))", (key,))
    except psycopg2.Error:
        pass


@contextmanager
def batch_commit(settings: Settings) -> Iterator[None]:
    """Hold the lake lock shared while a batch writes (many batches of different topics at once)."""
    with _advisory(settings, LAKE_KEY, shared=True):
        yield


@contextmanager
def lake_snapshot(settings: Settings) -> Iterator[None]:
    """Hold the lake lock exclusive: no batch is between its first Delta write and its ledger commit."""
    with _advisory(settings, LAKE_KEY, shared=False):
        yield


@contextmanager
def _advisory(settings: Settings, key: str, shared: bool) -> Iterator[None]:
    kind = "_shared" if shared else ""
    conn = ledger.connect(settings.postgres_dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT pg_advisory_lock{kind}(hashtext(%s))", (key,))
        try:
            yield
        finally:
            _unlock(conn, key, kind)
    finally:
        conn.close()
