-- Upsert recomputed sessions (absolute values) from the staging table. A row that is already
-- identical is not touched, so a replay writes nothing (docs/design.md, invariant 4).
INSERT INTO sessions AS t (session_id, entity_id, started_at, ended_at, first_event_time, last_event_time,
                           event_count, duration_seconds)
SELECT session_id, entity_id, started_at, ended_at, first_event_time, last_event_time, event_count, duration_seconds
FROM sessions_staging
ON CONFLICT (session_id) DO UPDATE SET
    entity_id = EXCLUDED.entity_id,
    started_at = EXCLUDED.started_at,
    ended_at = EXCLUDED.ended_at,
    first_event_time = EXCLUDED.first_event_time,
    last_event_time = EXCLUDED.last_event_time,
    event_count = EXCLUDED.event_count,
    duration_seconds = EXCLUDED.duration_seconds
WHERE (t.entity_id, t.started_at, t.ended_at, t.first_event_time, t.last_event_time, t.event_count,
       t.duration_seconds)
      IS DISTINCT FROM
      (EXCLUDED.entity_id, EXCLUDED.started_at, EXCLUDED.ended_at, EXCLUDED.first_event_time,
       EXCLUDED.last_event_time, EXCLUDED.event_count, EXCLUDED.duration_seconds);
