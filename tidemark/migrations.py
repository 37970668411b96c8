"""Apply ``sql/NNNN_name.sql`` migrations in order, once each, recording what was applied.

Each file runs in its own transaction together with its row in ``schema_migrations``; an advisory
lock serialises concurrent runs, so ``tidemark db migrate`` is safe to re-run and to run twice at once.
A migration edited after it was applied is an error: schema changes go in a new file.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.errors import TidemarkError
from spark_jobs.settings import PROJECT_ROOT, Settings

SQL_DIR = PROJECT_ROOT / "sql"
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
# Any constant works; it only has to be the same for every tidemark process.
_LOCK_KEY = 0x7469_6465  # "tide"


class MigrationError(TidemarkError):
    """The migrations on disk and in the database disagree; the message says how."""


@dataclass(frozen=True)
class Migration:
    version: int
    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def discover(sql_dir: Path = SQL_DIR) -> list[Migration]:
    """The migrations in ``sql_dir``, ordered; rejects misnamed files and duplicate versions."""
    migrations: dict[int, Migration] = {}
    for path in sorted(sql_dir.glob("*.sql")):
        match = _NAME.match(path.name)
        if not match:
            raise MigrationError(f"{path.name}: migration files are named NNNN_description.sql")
        version = int(match.group(1))
        if version in migrations:
            raise MigrationError(f"{path.name} and {migrations[version].name} share version {version}")
        migrations[version] = Migration(version, path)
    return [migrations[v] for v in sorted(migrations)]


def _make_read_only_for_others(cur) -> None:  # a psycopg2 cursor
    """Which migrations ran is the migrating role's business: others may only read it.

    Run as the owner role, the owner's default privileges (sql/roles/roles.sql) give the pipeline
    role write rights on schema_migrations when it is created here. Whatever created it first, each
    run takes them back, so the order of roles.sql and the first migration does not matter.
    """
    from psycopg2 import sql

    cur.execute(
        """SELECT DISTINCT grantee FROM information_schema.role_table_grants
           WHERE table_schema = current_schema() AND table_name = 'schema_migrations'
             AND grantee <> current_user AND privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE')"""
    )
    for (grantee,) in cur.fetchall():
        role = sql.SQL("PUBLIC") if grantee == "PUBLIC" else sql.Identifier(grantee)
        cur.execute(sql.SQL("REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON schema_migrations FROM {}").format(role))


def _create_schema(cur, schema: str) -> None:  # a psycopg2 cursor
    """Create a pipeline's schema, usable by every role that may use ``public`` (sql/roles/roles.sql grants
    that to the pipeline role, and the owner's default privileges give it rows in the tables created here)."""
    from psycopg2 import sql

    cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    cur.execute(
        """SELECT DISTINCT r.rolname FROM pg_namespace n, aclexplode(n.nspacl) a JOIN pg_roles r ON r.oid = a.grantee
           WHERE n.nspname = 'public' AND a.privilege_type = 'USAGE' AND r.rolname <> current_user"""
    )
    for (role,) in cur.fetchall():
        cur.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(role)))


def _check_encoding(conn) -> None:
    """Refuse a database that cannot hold any UTF-8 text: entity ids and properties are UTF-8, and a
    SQL_ASCII or LATIN1 database fails a batch's COPY on every retry of a non-Latin id."""
    with conn.cursor() as cur:
        cur.execute("SELECT current_database(), pg_encoding_to_char(encoding) FROM pg_database "
                    "WHERE datname = current_database()")  # fmt: skip
        name, encoding = cur.fetchone()
    conn.rollback()
    if encoding != "UTF8":
        raise MigrationError(
            f"database {name} is encoded {encoding}; tidemark stores UTF-8 text. Create it with "
            f"CREATE DATABASE {name} ENCODING 'UTF8' TEMPLATE template0 (and a UTF-8 or C locale), then migrate."
        )


def migrate_pipelines(settings: Settings) -> dict[str, list[str]]:
    """Migrate the schema of every pipeline :attr:`Settings.pipelines_file` declares (``public`` for the
    default pipeline, which deployments made before pipelines keep); returns what each got now."""
    schemas = {p.names.postgres_schema for p in settings.pipelines()}
    return {schema: migrate(settings.postgres_dsn, schema=schema) for schema in sorted(schemas)}


def migrate(dsn: str, sql_dir: Path = SQL_DIR, schema: str = "public") -> list[str]:
    """Apply pending migrations to ``schema`` (a pipeline's, created when missing); returns the names applied
    now (empty when up to date). Each schema has its own tables and its own ``schema_migrations``."""
    import psycopg2
    from psycopg2 import sql

    pending = discover(sql_dir)
    applied_now: list[str] = []
    conn = psycopg2.connect(dsn)
    try:
        _check_encoding(conn)
        with conn, conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
            if schema != "public":
                _create_schema(cur, schema)
            cur.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            cur.execute(
                """CREATE TABLE IF NOT EXISTS schema_migrations (
                       version    integer PRIMARY KEY,
                       name       text NOT NULL,
                       checksum   text NOT NULL,
                       applied_at timestamptz NOT NULL DEFAULT now())"""
            )
            _make_read_only_for_others(cur)
        with conn.cursor() as cur:
            cur.execute("SELECT version, name, checksum FROM schema_migrations")
            applied = {version: (name, checksum) for version, name, checksum in cur.fetchall()}
        conn.commit()
        for migration in pending:
            if migration.version in applied:
                name, checksum = applied[migration.version]
                if checksum != migration.checksum:
                    raise MigrationError(
                        f"{migration.name} was changed after it was applied (as {name}). "
                        "Put schema changes in a new migration file instead."
                    )
                continue
            with conn, conn.cursor() as cur:
                cur.execute(migration.path.read_text())
                cur.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, migration.checksum),
                )
            applied_now.append(migration.name)
    finally:
        if not conn.closed:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
            conn.commit()
            conn.close()
    return applied_now
