-- Delete the sessions a recompute replaced: of each recomputed entity, those starting at or after
-- its anchor whose ID the recompute no longer produced. The same rows as
-- delete_replaced_sessions_by_entity.sql, for a batch whose entities hold much of sessions (a
-- first run, a rebuild; postgres.replaced_sessions_delete chooses): one pass over sessions
-- against the anchors, hashed, costs less than a lookup per anchor.
DELETE FROM sessions AS s
USING session_anchors AS a
WHERE s.entity_id = a.entity_id
  AND s.started_at >= a.anchor
  AND NOT EXISTS (SELECT 1 FROM sessions_staging AS st WHERE st.session_id = s.session_id);
