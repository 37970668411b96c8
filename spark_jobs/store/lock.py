"""PostgreSQL advisory locks: one fenced writer per pipeline, and a consistent snapshot of its state.

Every lock is the pipeline's own (:meth:`Settings.lock_key`): two pipelines write, reconcile and take
snapshots at the same time, as their tables, schema and ledger are their own.

* :func:`single_writer`: only one run of a pipeline (scheduled ingest, backfill, repair) writes its
  Delta tables and PostgreSQL ``sessions`` at a time. Taking the lock increments the writer epoch
  (the pipeline's ``writer_epochs``); the run holds a :class:`WriterLease`.
* :func:`batch_commit`: every batch's writes, Delta then PostgreSQL, run inside one PostgreSQL
  transaction that first proves the lease still holds (the epoch is unchanged and the lock's backend
  still has the lock) and keeps the epoch row share-locked until the ledger row commits. A run that
  lost its lock (an idle timeout, a failover, a pooler, an operator's ``pg_terminate_backend``)
  cannot start or commit a batch once another run took over, and a run that takes over waits for a
  batch in flight to end before it does anything.
* :func:`one_reconcile`: one reconcile run at a time (two would record the same ranges' verdicts
  at once); a second one queues behind it, or fails at once saying which run holds it.
* :func:`lake_snapshot`: reconcile takes the lake lock *exclusive* for the moment it fixes the
  Delta versions and its PostgreSQL snapshot; every batch holds it *shared*, so reconcile sees each
  batch entirely or not at all. Writers wait at most that moment; reconcile waits at most one batch.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from spark_jobs import db
from spark_jobs.errors import ReconcileBusy, WriterBusy, WriterFenced
from spark_jobs.settings import Settings

log = logging.getLogger(__name__)

WRITER_KEY = "tidemark-writer"
LAKE_KEY = "tidemark-lake"
RECONCILE_KEY = "tidemark-reconcile"
EPOCH_ROW = "lake"  # writer_epochs.name
# libpq keepalives on the lock's connection: a dead peer is noticed in about a minute, not hours.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}


@dataclass
class WriterLease:
    """What a run that holds the writer lock carries: its epoch and the backend that holds the lock."""

    epoch: int
    backend_pid: int
    holder: str
    lost: threading.Event = field(default_factory=threading.Event)  # the heartbeat saw the connection fail

    def prove(self, cur) -> None:  # psycopg2 cursor, inside the batch's transaction
        """Fail unless this run still holds the lock; keep the epoch row share-locked until commit.

        A run taking over increments the epoch, which waits for this transaction: so once this
        passes, nobody else writes until the batch commits or fails.
        """
        cur.execute("SELECT epoch, holder FROM writer_epochs WHERE name = %s FOR SHARE", (EPOCH_ROW,))
        epoch, holder = cur.fetchone()
        if epoch != self.epoch:
            raise WriterFenced(
                f"this run lost the writer lock (epoch {self.epoch}) and {holder or 'another run'} took it over "
                f"(epoch {epoch}); nothing of this batch was committed. Run it again once that run ends: "
                "it resumes exactly where this one stopped."
            )
        cur.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s AND granted", (self.backend_pid,)
        )
        if cur.fetchone()[0] == 0:
            raise WriterFenced(
                "this run lost the writer lock (its PostgreSQL connection was closed: an idle timeout, a "
                "failover or a pooler); nothing of this batch was committed. Run it again: it resumes exactly "
                "where this one stopped."
            )

    def check(self, cur) -> None:  # psycopg2 cursor of the batch's transaction
        """:meth:`prove` again, right before a Delta write: a run whose batch connection died (a
        failover, a restart, an operator) stops before its next commit."""
        import psycopg2

        try:
            self.prove(cur)
        except psycopg2.Error as exc:
            raise WriterFenced(
                f"this run lost its PostgreSQL connection inside a batch ({' '.join(str(exc).split())}); the batch "
                "was not committed and another run may have taken over. Run it again: it resumes exactly where this "
                "one stopped, and adds nothing twice."
            ) from None


def describe_holder(what: str) -> str:
    return f"{what} on {socket.gethostname()} (pid {os.getpid()})"


@contextmanager
def single_writer(settings: Settings, what: str, wait: bool = False) -> Iterator[WriterLease]:
    """Hold the lake's writer lock for a run (``what`` names it, e.g. ``ingest:events``).

    The lock's connection is kept alive (TCP keepalives, no idle timeouts, a heartbeat query every
    ``settings.writer_heartbeat_seconds``). The lock is released before this returns, so a retry
    started at once gets it; a run that dies releases it with its connection.
    """
    holder = describe_holder(what)
    key = settings.lock_key(WRITER_KEY)
    with db.session(settings.pipeline_dsn, **KEEPALIVES) as conn:
        with conn.cursor() as cur:
            cur.execute("SET idle_session_timeout = 0")
            cur.execute("SET idle_in_transaction_session_timeout = 0")
            cur.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,))
            if not db.fetch_one(cur)[0]:
                if not wait:
                    raise _busy(cur, settings)
                cur.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
            # Waits for a batch in flight of a run that lost the lock (it holds the row FOR SHARE).
            cur.execute(
                """UPDATE writer_epochs SET epoch = epoch + 1, holder = %s, acquired_at = now()
                   WHERE name = %s RETURNING epoch""",
                (holder, EPOCH_ROW),
            )
            lease = WriterLease(db.fetch_one(cur)[0], conn.get_backend_pid(), holder)
        heartbeat = _Heartbeat(conn, lease, settings.writer_heartbeat_seconds)
        heartbeat.start()
        try:
            yield lease
        finally:
            heartbeat.stop()
            _unlock(conn, key)


# A session-level advisory lock on hashtext(key) is granted (the key given twice as parameters).
_HELD = """l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
           AND l.classid::bigint = (hashtext(%s)::bigint >> 32) & 4294967295
           AND l.objid::bigint = hashtext(%s)::bigint & 4294967295"""


def check_writer_free(settings: Settings) -> None:
    """Fail at once (``WriterBusy``, naming the run) when a run holds the writer lock: what a run
    that would not wait finds, said before it starts Spark. A look, not a claim: the run still takes
    the lock itself, and a run that starts in between is found then."""
    with db.session(settings.pipeline_dsn) as conn, conn.cursor() as cur:
        key = settings.lock_key(WRITER_KEY)
        cur.execute(f"SELECT count(*) FROM pg_locks AS l WHERE {_HELD}", (key, key))
        if db.fetch_one(cur)[0]:
            raise _busy(cur, settings)


def _busy(cur, settings: Settings) -> WriterBusy:
    return WriterBusy(
        f"{_current_holder(cur)} is writing the pipeline {settings.pipeline!r}; one run of a pipeline (scheduled "
        "ingest, backfill or repair) writes at a time. Wait for it to finish, or run with --wait to queue."
    )


def _current_holder(cur) -> str:
    cur.execute("SELECT holder, acquired_at FROM writer_epochs WHERE name = %s", (EPOCH_ROW,))
    row = cur.fetchone()
    if row is None or row[0] is None:
        return "another tidemark run"
    return f"another tidemark run ({row[0]}, since {row[1]:%Y-%m-%d %H:%M:%S %Z})"


class _Heartbeat(threading.Thread):
    """Queries the lock's connection now and then, so poolers and idle timeouts see it in use."""

    def __init__(self, conn, lease: WriterLease, every: float) -> None:
        super().__init__(name="tidemark-writer-heartbeat", daemon=True)
        self.conn, self.lease, self.every = conn, lease, every
        self._stopped = threading.Event()

    def run(self) -> None:
        import psycopg2

        while not self._stopped.wait(self.every):
            try:
                with self.conn.cursor() as cur:
                    cur.execute("SELECT 1")
            except psycopg2.Error as exc:
                self.lease.lost.set()
                log.warning(
                    "the writer lock's PostgreSQL connection failed (%s); this run will stop at its next batch",
                    " ".join(str(exc).split()),
                )
                return

    def stop(self) -> None:
        self._stopped.set()
        self.join()


def _unlock(conn, key: str, kind: str = "") -> None:  # psycopg2 connection
    """Release at once; on a broken connection leave it to the close (the run's own error matters more)."""
    import psycopg2

    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT pg_advisory_unlock{kind}(hashtext(%s))", (key,))
    except psycopg2.Error:
        pass


@contextmanager
def batch_commit(settings: Settings, lease: WriterLease) -> Iterator:
    """One batch's writes: yields the cursor of the transaction that carries its PostgreSQL writes.

    Holds the lake lock shared (many batches of different topics at once) and proves ``lease``
    first (:meth:`WriterLease.prove`). The Delta writes run inside, the PostgreSQL writes go on the
    cursor; the transaction commits when the block ends without an error.
    """
    with _advisory(settings, LAKE_KEY, shared=True), db.transaction(settings.pipeline_dsn) as cur:
        cur.execute("SET LOCAL idle_in_transaction_session_timeout = 0")  # open while Delta writes
        lease.prove(cur)
        yield cur


def transaction_lock(cur, key: str) -> None:
    """Hold the advisory lock ``key`` until the transaction of ``cur`` ends (one landing of a range
    at a time)."""
    cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (key,))


@contextmanager
def one_reconcile(settings: Settings, run_id: str, wait: bool = False) -> Iterator[None]:
    """Hold the reconcile lock for run ``run_id``; with ``wait``, queue for it, else fail at once
    (before any counting) naming the run that holds it. A run that dies releases it with its connection."""
    holder = describe_holder(f"reconcile {run_id}")[:63]  # PostgreSQL keeps 63 bytes of an application_name
    key = settings.lock_key(RECONCILE_KEY)
    with db.session(settings.pipeline_dsn, application_name=holder) as conn:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,))
            if not db.fetch_one(cur)[0]:
                running = _advisory_holder(cur, key, "another reconcile run")
                if not wait:
                    raise ReconcileBusy(
                        f"{running} is checking the sinks; one reconcile runs at a time. Wait for it to "
                        "finish, or run with --wait to queue."
                    )
                log.info("waiting for %s to finish", running)
                cur.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
        try:
            yield
        finally:
            _unlock(conn, key)


def _advisory_holder(cur, key: str, default: str) -> str:
    """Who holds the session-level advisory lock ``key``: its connection's application_name and since when."""
    cur.execute(
        f"SELECT a.application_name, a.backend_start FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        f"WHERE {_HELD}",
        (key, key),
    )
    row = cur.fetchone()
    if row is None or not row[0]:
        return default
    return f"{row[0]} (since {row[1]:%Y-%m-%d %H:%M:%S %Z})"


@contextmanager
def lake_snapshot(settings: Settings) -> Iterator[None]:
    """Hold the lake lock exclusive: no batch is between its first Delta write and its ledger commit."""
    with _advisory(settings, LAKE_KEY, shared=False):
        yield


@contextmanager
def _advisory(settings: Settings, name: str, shared: bool) -> Iterator[None]:
    kind = "_shared" if shared else ""
    key = settings.lock_key(name)
    with db.session(settings.pipeline_dsn) as conn:
        with conn.cursor() as cur:
            cur.execute(f"SELECT pg_advisory_lock{kind}(hashtext(%s))", (key,))
        try:
            yield
        finally:
            _unlock(conn, key, kind)
