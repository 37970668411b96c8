-- Delete the sessions a recompute replaced: of each recomputed entity, those starting at or after
-- its anchor whose ID the recompute no longer produced (e.g. two sessions merged by a record a
-- backfill added). Run after COPYing session_anchors and sessions_staging.
--
-- For a batch whose entities hold a small part of sessions (postgres.replaced_sessions_delete
-- chooses): each anchor looks up its entity's sessions through sessions_by_entity (LATERAL, and
-- OFFSET 0 so the planner cannot flatten it into a join). As a plain join, the planner guesses a
-- third of an entity's sessions start after its anchor (it cannot know each anchor is near the
-- entity's last session) and reads all of sessions instead: a cost that grew with every session
-- ever stored. delete_replaced_sessions_by_scan.sql deletes the same rows.
DELETE FROM sessions AS s
WHERE s.session_id IN (
    SELECT replaced.session_id
    FROM session_anchors AS a
    CROSS JOIN LATERAL (
        SELECT session_id FROM sessions AS e
        WHERE e.entity_id = a.entity_id AND e.started_at >= a.anchor
        OFFSET 0
    ) AS replaced
    WHERE NOT EXISTS (SELECT 1 FROM sessions_staging AS st WHERE st.session_id = replaced.session_id)
);
