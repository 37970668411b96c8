"""PostgreSQL ``sessions``: a batch's upsert, on a real server, against few and many stored sessions.

A batch replaces its entities' sessions from their anchors on. When its entities hold a small
part of ``sessions`` (a scheduled batch on a grown table), what it deletes must be found through
the entities, not by reading every session ever stored: the soak's PostgreSQL step doubled over
500 runs while ``sessions`` grew. When they hold most of it (a first run, a rebuild), one pass over
the table costs less than a lookup per entity: the bench's cold upsert (P2c/B3) fell below its
target with lookups. Checked in the plan PostgreSQL runs, not timed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spark_jobs.contract import SESSION_COLUMNS
from spark_jobs.db import connect, fetch_one, transaction
from spark_jobs.sinks import postgres

ENTITIES = 1_000
STORED_PER_ENTITY = 50  # 50,000 stored sessions: enough for the planner to prefer reading them all
START = datetime(2026, 1, 1, tzinfo=UTC)


def session(entity: int, started: datetime, session_id: str | None = None) -> tuple:
    ended = started + timedelta(seconds=20)
    return (session_id or f"s-{entity}-{started.timestamp():.3f}", f"entity-{entity}", started, ended,
            started, ended, 3, 20.0)  # fmt: skip


def plan_nodes(plan: dict) -> list[dict]:
    """Every node of an ``EXPLAIN (FORMAT JSON)`` plan."""
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes += plan_nodes(child)
    return nodes


def test_a_batch_replaces_its_entities_sessions_without_reading_all_stored_sessions(database) -> None:
    with transaction(database.postgres_dsn) as cur:
        # Entity e's sessions start every 30 s from START (ids s-e-k), one a run of the soak.
        cur.execute(
            """INSERT INTO sessions
               SELECT 's-' || e || '-' || k, 'entity-' || e, t, t + interval '20 seconds',
                      t, t + interval '20 seconds', 3, 20
               FROM generate_series(0, %s - 1) AS e, generate_series(0, %s - 1) AS k,
                    LATERAL (SELECT %s::timestamptz + k * interval '30 seconds' AS t) AS at""",
            (ENTITIES, STORED_PER_ENTITY, START),
        )
        cur.execute("ANALYZE sessions")
        last = START + (STORED_PER_ENTITY - 1) * timedelta(seconds=30)
        touched = range(0, ENTITIES, 3)
        # Every touched entity's last stored session is recomputed: entity 0's is replaced by
        # one that starts later (the stored one must go), the others' are kept as they are.
        rows = [session(0, last + timedelta(seconds=5))]
        rows += [session(e, last, f"s-{e}-{STORED_PER_ENTITY - 1}") for e in touched if e != 0]
        anchors = [(f"entity-{e}", last) for e in touched]
        written, deleted = postgres.upsert_sessions(cur, rows, anchors)

        assert (written, deleted) == (1, 1)  # the others' sessions are unchanged: not written
        cur.execute("SELECT session_id FROM sessions WHERE entity_id = 'entity-0' AND started_at >= %s", (last,))
        assert [r[0] for r in cur.fetchall()] == [rows[0][0]]
        cur.execute("SELECT count(*) FROM sessions")
        assert fetch_one(cur)[0] == ENTITIES * STORED_PER_ENTITY  # one replaced, nothing else lost

        # The same statement, planned with the same staged rows: each anchor's entity is looked up.
        reads = sessions_reads(cur, len(anchors))
        assert reads, "sessions is not read in the plan"
        assert all(kind != "Seq Scan" for kind in reads), f"the delete reads every stored session: {reads}"


def test_a_batch_of_every_entity_replaces_their_sessions_in_one_pass(database) -> None:
    """A first run or a rebuild: the batch's anchors cover every stored session."""
    conn = connect(database.postgres_dsn)
    try:
        stored = [session(e, START) for e in range(ENTITIES)]
        with conn, conn.cursor() as cur:  # the first run
            assert postgres.upsert_sessions(cur, stored, [(f"entity-{e}", START) for e in range(ENTITIES)]) == (
                ENTITIES,
                0,
            )
        with conn, conn.cursor() as cur:
            # Recomputed: entity 0's session now starts later (the stored one must go), entity 1 has
            # none left, the others' are unchanged.
            rows = [session(0, START + timedelta(seconds=5))] + stored[2:]
            anchors = [(f"entity-{e}", START) for e in range(ENTITIES)]

            assert postgres.upsert_sessions(cur, rows, anchors) == (1, 2)
            cur.execute("SELECT session_id FROM sessions WHERE entity_id IN ('entity-0', 'entity-1')")
            assert [r[0] for r in cur.fetchall()] == [rows[0][0]]
            cur.execute("SELECT count(*) FROM sessions")
            assert fetch_one(cur)[0] == ENTITIES - 1

            # Planned with the same staged rows: sessions is read once, not looked up per anchor.
            reads = sessions_reads(cur, len(anchors))
            assert reads == ["Seq Scan"], f"the delete looks up sessions per anchor: {reads}"
    finally:
        conn.close()


def sessions_reads(cur, anchors: int) -> list[str]:  # a psycopg2 cursor
    """How the delete that ``upsert_sessions`` runs for ``anchors`` anchors reads ``sessions`` (its
    plan's node types), with the staged rows the cursor's transaction holds."""
    cur.execute("EXPLAIN (FORMAT JSON) " + postgres.replaced_sessions_delete(cur, anchors))
    nodes = plan_nodes(cur.fetchone()[0][0]["Plan"])
    return [n["Node Type"] for n in nodes if n.get("Relation Name") == "sessions" and n["Node Type"] != "ModifyTable"]


def test_both_ways_of_finding_replaced_sessions_delete_the_same_rows(database) -> None:
    """Entities with sessions before and after their anchors, some recomputed away: each statement
    deletes exactly the stored sessions from an anchor on that the recompute no longer produced."""
    with transaction(database.postgres_dsn) as cur:
        stored = [session(e, START + k * timedelta(minutes=30)) for e in range(20) for k in range(6)]
        postgres.copy_rows(cur, "sessions", SESSION_COLUMNS, stored)
        anchor = START + 3 * timedelta(minutes=30)
        anchors = [(f"entity-{e}", anchor) for e in range(0, 20, 2)]  # the odd entities are not touched
        # Recomputed from the anchor on: entity 0 keeps its sessions, the others keep every other one.
        kept = [r for r in stored if r[1] == "entity-0" and r[2] >= anchor]
        kept += [r for r in stored if r[1] in {a for a, _ in anchors[1:]} and r[2] >= anchor][::2]
        expected = {r[0] for r in stored if (r[1], anchor) in anchors and r[2] >= anchor and r not in kept}
        assert expected  # the scenario deletes something, and not everything from the anchors on
        cur.execute("CREATE TEMP TABLE sessions_staging (LIKE sessions INCLUDING DEFAULTS) ON COMMIT DROP")
        cur.execute("CREATE TEMP TABLE session_anchors (entity_id text PRIMARY KEY, anchor timestamptz) ON COMMIT DROP")
        postgres.copy_rows(cur, "sessions_staging", SESSION_COLUMNS, kept)
        postgres.copy_rows(cur, "session_anchors", ("entity_id", "anchor"), anchors)
        for way in ("entity", "scan"):
            statement = (postgres.QUERIES / f"delete_replaced_sessions_by_{way}.sql").read_text()
            cur.execute("SAVEPOINT before_delete")
            cur.execute(statement.rstrip().rstrip(";") + " RETURNING s.session_id")
            assert {r[0] for r in cur.fetchall()} == expected, way
            cur.execute("ROLLBACK TO SAVEPOINT before_delete")
