-- A run that failed is a row of ingest_runs too: its cause (tidemark's one line, or the error's first
-- line for a bug) and the batches it committed before failing. NULL: the run finished.
ALTER TABLE ingest_runs ADD COLUMN failure text;
