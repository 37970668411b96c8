"""PostgreSQL ``sessions``: a batch's upsert, on a real server with a table of many stored sessions.

A batch replaces its entities' sessions from their anchors on. What it deletes must be found
through the entities, not by reading every session ever stored: the soak's PostgreSQL step
doubled over 500 runs while ``sessions`` grew. Checked in the plan PostgreSQL chooses, not timed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spark_jobs.ledger import connect
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
    conn = connect(database.postgres_dsn)
    try:
        with conn, conn.cursor() as cur:
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
            assert cur.fetchone()[0] == ENTITIES * STORED_PER_ENTITY  # one replaced, nothing else lost

            # The same statement, planned with the same staged rows: each anchor's entity is looked up.
            cur.execute("EXPLAIN (FORMAT JSON) " + (postgres.QUERIES / "delete_replaced_sessions.sql").read_text())
            nodes = plan_nodes(cur.fetchone()[0][0]["Plan"])
            reads = [(n["Node Type"], n.get("Index Name")) for n in nodes if n.get("Relation Name") == "sessions"]
            assert reads, f"sessions is not read in the plan: {nodes}"
            assert all(kind != "Seq Scan" for kind, _ in reads), f"the delete reads every stored session: {reads}"
    finally:
        conn.close()
