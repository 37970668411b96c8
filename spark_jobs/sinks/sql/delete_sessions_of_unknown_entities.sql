-- A full rebuild: the anchors name every entity the lake knows; sessions of any other entity go.
DELETE FROM sessions AS s
WHERE NOT EXISTS (SELECT 1 FROM session_anchors AS a WHERE a.entity_id = s.entity_id)
