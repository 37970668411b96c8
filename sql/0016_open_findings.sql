-- Findings stay open until fixed (docs/design.md, "Open findings"). A run that checks nothing
-- cannot say a finding went away: each finding is kept here from the run that found it until a
-- later check of the same thing finds it fixed (a repair's re-check, or any run that checks it
-- again) or an operator acknowledges it (`tidemark findings --acknowledge ID --reason TEXT`).
CREATE TABLE findings (
    finding_id   bigserial   PRIMARY KEY,
    finding_key  text        NOT NULL,  -- what it is about: "range <pipeline> <batch> <topic> <partition>", ...
    kind         text        NOT NULL,  -- range, gap, sessions_sinks, sessions_events (as in reconcile_runs.findings)
    finding      jsonb       NOT NULL,  -- as the latest run that saw it described it
    opened_by    text        NOT NULL,  -- the reconcile run that found it
    opened_at    timestamptz NOT NULL DEFAULT now(),
    seen_by      text        NOT NULL,  -- the latest run that found it, or carried it over unchecked
    closed_by    text,                  -- the run whose check found it fixed, or the operator who acknowledged it
    closed_at    timestamptz,
    closed_why   text
);

CREATE UNIQUE INDEX findings_open ON findings (finding_key) WHERE closed_at IS NULL;

-- Per run: the findings open after it, and how many of them it opened.
ALTER TABLE reconcile_runs
    ADD COLUMN open_findings   integer,
    ADD COLUMN opened_findings integer;
