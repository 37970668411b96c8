"""Least-privilege PostgreSQL roles: ``sql/roles/roles.sql`` run by psql as an administrator would.

Each test gets roles and a database of its own (unique names, passed as psql variables), created by
the script on the test server as its superuser and dropped afterwards. Migrations run as the owner
role; a real ingest and a reconcile count run as the pipeline role, which must be refused every
schema change.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import psycopg2
import pytest
from psycopg2 import errors
from psycopg2.extensions import make_dsn, parse_dsn

from spark_jobs import reconcile
from spark_jobs.db import connect, transaction
from spark_jobs.ingest import run_scheduled
from spark_jobs.settings import PROJECT_ROOT, Settings
from tidemark.migrations import discover, migrate
from tidemark.producer import ProduceSpec, produce

ROLES_SQL = PROJECT_ROOT / "sql" / "roles" / "roles.sql"


def psql_binary() -> str:
    found = shutil.which("psql")
    if found:
        return found
    from tidemark.embedded.postgres_server import postgres_bin_dir

    return str(postgres_bin_dir() / "psql")


@dataclass(frozen=True)
class Roles:
    owner: str
    pipeline: str
    dbname: str
    server: dict[str, str]  # host and port of the test server

    def dsn(self, user: str, dbname: str | None = None) -> str:
        return make_dsn(**self.server, dbname=dbname or self.dbname, user=user)

    @property
    def owner_dsn(self) -> str:
        return self.dsn(self.owner)

    @property
    def pipeline_dsn(self) -> str:
        return self.dsn(self.pipeline)

    @property
    def admin_dsn(self) -> str:
        return self.dsn("postgres", "postgres")  # the embedded server's superuser

    def apply(self) -> subprocess.CompletedProcess[str]:
        """Run roles.sql the way the README tells an administrator to."""
        argv = [psql_binary(), "-X", "-v", "ON_ERROR_STOP=1", "-h", self.server["host"], "-p", self.server["port"]]
        argv += ["-U", "postgres", "-d", "postgres", "-f", str(ROLES_SQL)]
        argv += ["-v", f"owner={self.owner}", "-v", f"pipeline={self.pipeline}", "-v", f"dbname={self.dbname}"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done


@pytest.fixture
def roles(stack: Settings):
    suffix = uuid.uuid4().hex[:8]
    server = parse_dsn(stack.postgres_dsn)
    created = Roles(f"tm_owner_{suffix}", f"tm_pipeline_{suffix}", f"tidemark_roles_{suffix}",
                    {"host": server["host"], "port": server["port"]})  # fmt: skip
    yield created
    admin = connect(created.admin_dsn)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{created.dbname}" WITH (FORCE)')
            cur.execute(f'DROP ROLE IF EXISTS "{created.pipeline}"')
            cur.execute(f'DROP ROLE IF EXISTS "{created.owner}"')
    finally:
        admin.close()


def fetch(dsn: str, sql: str, *args: object) -> list[tuple]:
    with transaction(dsn) as cur:
        cur.execute(sql, args[0] if len(args) == 1 and isinstance(args[0], dict) else args)
        return cur.fetchall() if cur.description else []


def refused(dsn: str, sql: str) -> str:
    """Run ``sql`` and return PostgreSQL's refusal; fails the test if it was allowed."""
    with pytest.raises(errors.InsufficientPrivilege) as refusal:
        fetch(dsn, sql)
    return str(refusal.value).splitlines()[0]


def owned_by(roles: Roles, role: str) -> set[tuple[str, str]]:
    """Everything ``role`` owns: the database, schemas, tables and other relations (not temporary ones)."""
    rows = fetch(
        roles.dsn("postgres"),
        """SELECT 'database', datname FROM pg_database WHERE datdba = %(role)s::regrole
           UNION ALL SELECT 'schema', nspname FROM pg_namespace WHERE nspowner = %(role)s::regrole
           UNION ALL SELECT CASE relkind WHEN 'r' THEN 'table' ELSE 'relation' END, relname
                     FROM pg_class WHERE relowner = %(role)s::regrole AND relpersistence <> 't'""",
        {"role": role},
    )
    return set(rows)


def pipeline_grants(roles: Roles, table: str) -> str:
    [(granted,)] = fetch(
        roles.pipeline_dsn,
        """SELECT coalesce(string_agg(privilege_type, ',' ORDER BY privilege_type), '')
           FROM information_schema.table_privileges WHERE grantee = current_user AND table_name = %s""",
        table,
    )
    return granted


def test_roles_script_is_idempotent_and_gives_the_pipeline_rows_only(roles: Roles) -> None:
    roles.apply()
    # The first migration creates schema_migrations after roles.sql ran, and leaves it read-only for
    # the pipeline by itself (no second roles.sql run needed).
    assert migrate(roles.owner_dsn) == [m.name for m in discover()]
    assert pipeline_grants(roles, "schema_migrations") == "SELECT"
    roles.apply()  # again, after the migrations: same result

    attributes = fetch(
        roles.admin_dsn,
        """SELECT rolname, rolcanlogin, rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls
           FROM pg_roles WHERE rolname IN (%s, %s) ORDER BY rolname""",
        roles.owner,
        roles.pipeline,
    )
    expected = [(name, True, False, False, False, False, False) for name in sorted((roles.owner, roles.pipeline))]
    assert attributes == expected
    assert fetch(roles.admin_dsn, "SELECT pg_has_role(%s, %s, 'MEMBER')", roles.pipeline, roles.owner) == [(False,)]

    owned = owned_by(roles, roles.owner)
    tables = {name for kind, name in owned if kind == "table"}
    assert tables == {"ledger_batches", "ledger_ranges", "sessions", "session_rules", "contracts", "reconcile_runs",
                      "reconcile_ranges", "verified_ranges", "range_moves", "repairs", "reconcile_lag",
                      "pipeline_starts", "retention_losses", "writer_epochs", "write_attempts", "write_floors",
                      "findings", "ingest_runs", "ingest_lag", "quarantine_reasons", "readmitted_reasons",
                      "readmit_attempts", "quarantine_attempts", "readmit_selections", "schema_migrations"}  # fmt: skip
    assert ("database", roles.dbname) in owned and ("schema", "public") not in owned  # pg_database_owner's
    assert owned_by(roles, roles.pipeline) == set()

    privileges = fetch(
        roles.pipeline_dsn,
        """SELECT has_database_privilege(current_database(), 'CONNECT'),
                  has_database_privilege(current_database(), 'TEMP'),
                  has_database_privilege(current_database(), 'CREATE'),
                  has_schema_privilege('public', 'USAGE'),
                  has_schema_privilege('public', 'CREATE')""",
    )
    assert privileges == [(True, True, False, True, False)]  # connect, temp; no create; usage; no create
    granted = fetch(
        roles.pipeline_dsn,
        """SELECT table_name, string_agg(privilege_type, ',' ORDER BY privilege_type)
           FROM information_schema.table_privileges WHERE grantee = current_user GROUP BY table_name""",
    )
    rows = "DELETE,INSERT,SELECT,UPDATE"
    assert dict(granted) == {name: rows for name in tables - {"schema_migrations"}} | {"schema_migrations": "SELECT"}

    # Nobody else may connect to the database (PUBLIC may by default).
    stranger = f"tm_stranger_{uuid.uuid4().hex[:8]}"
    admin = connect(roles.admin_dsn)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(f'CREATE ROLE "{stranger}" LOGIN')
        with pytest.raises(ConnectionError, match="permission denied for database"):
            connect(roles.dsn(stranger))
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP ROLE "{stranger}"')
        admin.close()


def test_a_pipelines_own_schema_gives_the_pipeline_role_rows_only(roles: Roles) -> None:
    """`tidemark db migrate` creates a declared pipeline's schema as the owner: the pipeline role uses it
    and writes rows in its tables, as in public, creates nothing there, and a re-run of roles.sql keeps it so."""
    roles.apply()
    migrate(roles.owner_dsn)
    assert migrate(roles.owner_dsn, schema="web") == [m.name for m in discover()]
    for _ in range(2):  # and after roles.sql runs again
        privileges = fetch(
            roles.pipeline_dsn, "SELECT has_schema_privilege('web', 'USAGE'), has_schema_privilege('web', 'CREATE')"
        )
        assert privileges == [(True, False)]
        granted = fetch(
            roles.pipeline_dsn,
            """SELECT table_name, string_agg(privilege_type, ',' ORDER BY privilege_type)
               FROM information_schema.table_privileges
               WHERE grantee = current_user AND table_schema = 'web' GROUP BY table_name""",
        )
        public = fetch(
            roles.pipeline_dsn,
            """SELECT table_name, string_agg(privilege_type, ',' ORDER BY privilege_type)
               FROM information_schema.table_privileges
               WHERE grantee = current_user AND table_schema = 'public' GROUP BY table_name""",
        )
        assert dict(granted) == dict(public) and dict(granted)["schema_migrations"] == "SELECT"
        assert dict(granted)["ledger_batches"] == "DELETE,INSERT,SELECT,UPDATE"
        assert ("schema", "web") in owned_by(roles, roles.owner)
        roles.apply()
    assert "permission denied for schema web" in refused(roles.pipeline_dsn, "CREATE TABLE web.mine (a int)")


def test_the_pipeline_role_ingests_and_reconciles_but_cannot_change_the_schema(
    roles: Roles, stack: Settings, spark, topic: str, tmp_path: Path
) -> None:
    roles.apply()
    migrate(roles.owner_dsn)  # leaves schema_migrations read-only for the pipeline by itself
    home = stack.home / "runs" / f"roles-{uuid.uuid4().hex[:8]}"
    settings = replace(
        stack,
        postgres_dsn=roles.pipeline_dsn,
        lake_root=str(home / "lake"),
        checkpoint_root=str(home / "checkpoints"),
        topic=topic,
    )
    report = produce(settings, ProduceSpec(count=300, entities=12, duplicate_rate=0.05, malformed_rate=0.03, seed=11))

    # A real scheduled ingest as the pipeline role: advisory lock, LOCK TABLE, temporary staging
    # tables, COPY, upserts and deletes of sessions, ledger rows.
    results = run_scheduled(spark, settings)
    assert sum(r.read for r in results) == report.committed
    [(read, accepted, duplicates, quarantined)] = fetch(
        roles.pipeline_dsn,
        "SELECT sum(records_read), sum(accepted), sum(duplicates), sum(quarantined) FROM ledger_batches "
        "WHERE pipeline = %s",
        f"ingest:{topic}",
    )
    assert read == report.committed == accepted + duplicates + quarantined
    assert duplicates > 0 and quarantined > 0
    [(sessions, events)] = fetch(roles.pipeline_dsn, "SELECT count(*), sum(event_count) FROM sessions")
    assert sessions > 0 and events == accepted
    # Reconcile also runs as the pipeline role (the lake lock, a REPEATABLE READ snapshot, its own rows).
    checked = reconcile.run(settings, f"roles-{topic}", lambda: spark)
    assert checked is not None
    assert checked.ok, checked.summary()
    assert checked.postgres_sessions.count == sessions == checked.delta_sessions.count
    assert owned_by(roles, roles.pipeline) == set()

    # No DDL of any kind.
    pipeline = roles.pipeline_dsn
    assert "permission denied for schema public" in refused(pipeline, "CREATE TABLE sneaky (id int)")
    assert "must be owner of table sessions" in refused(pipeline, "DROP TABLE sessions")
    assert "must be owner of table sessions" in refused(pipeline, "ALTER TABLE sessions ADD COLUMN sneaky int")
    assert "must be owner of table sessions" in refused(pipeline, "CREATE INDEX sneaky ON sessions (entity_id)")
    assert "permission denied for table sessions" in refused(pipeline, "TRUNCATE sessions")
    assert "permission denied for database" in refused(pipeline, "CREATE SCHEMA sneaky")
    assert "permission denied for table schema_migrations" in refused(
        pipeline, "INSERT INTO schema_migrations (version, name, checksum) VALUES (9999, 'x', 'y')"
    )

    # Nor migrations: neither re-running the applied ones nor a new one.
    with pytest.raises(errors.InsufficientPrivilege):
        migrate(pipeline)
    migrations = tmp_path / "sql"
    migrations.mkdir()
    for migration in discover():
        shutil.copy(migration.path, migrations / migration.name)
    (migrations / "0999_extra.sql").write_text("CREATE TABLE extra (id integer PRIMARY KEY);\n")
    with pytest.raises(psycopg2.Error) as refusal:
        migrate(pipeline, migrations)
    assert isinstance(refusal.value, errors.InsufficientPrivilege), refusal.value
    assert fetch(roles.owner_dsn, "SELECT to_regclass('extra') IS NULL") == [(True,)]

    # The owner applies it, and the pipeline can use the new table at once (default privileges).
    assert migrate(roles.owner_dsn, migrations) == ["0999_extra.sql"]
    fetch(pipeline, "INSERT INTO extra VALUES (1)")
    assert fetch(pipeline, "SELECT id FROM extra") == [(1,)]
    assert "must be owner of table extra" in refused(pipeline, "DROP TABLE extra")
