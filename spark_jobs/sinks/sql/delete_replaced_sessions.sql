-- Delete the sessions a recompute replaced: of each recomputed entity, those starting at or after
-- its anchor whose ID the recompute no longer produced (e.g. two sessions merged by a record a
-- backfill added). Run after COPYing session_anchors and sessions_staging.
DELETE FROM sessions AS s
USING session_anchors AS a
WHERE s.entity_id = a.entity_id
  AND s.started_at >= a.anchor
  AND NOT EXISTS (SELECT 1 FROM sessions_staging AS st WHERE st.session_id = s.session_id);
