-- Sessions as the Delta `sessions` table holds them (DESIGN invariant 6). Values are absolute,
-- recomputed from the deduplicated events, never incremented.
-- session_id = left(hex(sha256(entity_id || '|' || started_at in epoch ms)), 32); see spark_jobs/sessionize.py.
CREATE TABLE sessions (
    session_id        text             PRIMARY KEY,
    entity_id         text             NOT NULL,
    started_at        timestamptz      NOT NULL,
    ended_at          timestamptz      NOT NULL,
    first_event_time  timestamptz      NOT NULL,
    last_event_time   timestamptz      NOT NULL,
    event_count       bigint           NOT NULL CHECK (event_count > 0),
    duration_seconds  double precision NOT NULL CHECK (duration_seconds >= 0),
    CHECK (ended_at >= started_at)
);

CREATE INDEX sessions_by_entity ON sessions (entity_id, started_at);
