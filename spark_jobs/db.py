"""PostgreSQL connections: the one way tidemark opens a connection and a transaction.

Each table group has one module that owns its SQL and takes a cursor (the ``store`` package's:
``store.ledger``, ``store.lock``, ``store.history``, ...; and ``sinks.postgres``); callers open the
transaction here and pass the cursor down, so a batch's writes and its ledger rows share one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from spark_jobs.errors import NotMigrated, ServiceUnavailable

if TYPE_CHECKING:
    from psycopg2.extensions import connection, cursor


def connect(dsn: str, **options: str | int) -> connection:
    """A psycopg2 connection (libpq ``options`` added); an unreachable server is one line (never with
    the password), not a traceback."""
    import psycopg2

    try:
        # psycopg2's default factories named, so that ``options`` can only be libpq's keywords.
        return psycopg2.connect(dsn, connection_factory=None, cursor_factory=None, connect_timeout=10, **options)
    except psycopg2.OperationalError as exc:
        reason = " ".join(str(exc).split())  # libpq's message spans lines
        reason += "" if reason.endswith((".", "?")) else "."
        raise ServiceUnavailable(
            f"cannot connect to PostgreSQL at {describe_dsn(dsn)}: {reason} Start it with `tidemark up` "
            "or fix TIDEMARK_POSTGRES_DSN (the Airflow connection tidemark_postgres)."
        ) from None


def fetch_one(cur: cursor) -> tuple[Any, ...]:
    """The row of the query ``cur`` ran that always returns one (an aggregate, a function's value, a
    ``RETURNING`` of a row the migrations create): none is a bug, said as such."""
    row = cur.fetchone()
    if row is None:
        raise RuntimeError("a query that always returns a row returned none")
    return row


def check_reachable(dsn: str) -> None:
    """Fail with :class:`ServiceUnavailable`'s one line unless PostgreSQL at ``dsn`` accepts a connection."""
    connect(dsn).close()


@contextmanager
def transaction(dsn: str, isolation_level: str | None = None, **options: str | int) -> Iterator[cursor]:
    """A cursor inside one transaction: committed when the block ends, rolled back when it raises,
    the connection closed either way. ``isolation_level`` e.g. ``"REPEATABLE READ"``."""
    import psycopg2

    conn = connect(dsn, **options)
    try:
        if isolation_level:
            conn.set_session(isolation_level=isolation_level)
        with _migrated(dsn), conn.cursor() as cur:
            try:
                yield cur
            except BaseException:
                # A connection the server closed (a failover, pg_terminate_backend) cannot roll back, and the
                # error of trying must not hide the block's own (WriterFenced says what happened and what to do).
                with suppress(psycopg2.InterfaceError, psycopg2.OperationalError):
                    conn.rollback()
                raise
        conn.commit()
    finally:
        conn.close()


@contextmanager
def session(dsn: str, **options: str | int) -> Iterator[connection]:
    """A connection in autocommit mode, closed when the block ends: for what lives with a session,
    not a transaction (advisory locks, ``CREATE DATABASE``)."""
    conn = connect(dsn, **options)
    try:
        conn.autocommit = True
        with _migrated(dsn):
            yield conn
    finally:
        conn.close()


@contextmanager
def _migrated(dsn: str) -> Iterator[None]:
    """A table the migrations create is missing: the database is not migrated (one line, not a traceback)."""
    import psycopg2.errors

    try:
        yield
    except psycopg2.errors.UndefinedTable as exc:
        missing = str(exc).splitlines()[0].removeprefix("relation ").removesuffix(" does not exist")
        raise NotMigrated(
            f"PostgreSQL at {describe_dsn(dsn)} has no table {missing}: run `tidemark db migrate` (make migrate)"
        ) from None


def describe_dsn(dsn: str) -> str:
    """``host:port/dbname as user``: where a DSN points, without its password or other options."""
    from psycopg2.extensions import parse_dsn

    try:
        params = parse_dsn(dsn)
    except Exception:  # a DSN libpq cannot parse: say so, and show none of it
        return "(a DSN that cannot be parsed)"
    where = f"{params.get('host', 'localhost')}:{params.get('port', 5432)}/{params.get('dbname', '?')}"
    return f"{where} as {params['user']}" if params.get("user") else where
