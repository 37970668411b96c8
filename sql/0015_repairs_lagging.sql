-- A repair's re-check can find the sinks consistent but behind Kafka ("lagging", as a reconcile run
-- can): the repair's status is its re-check's, so 'lagging' is one too (found by the model test,
-- where a repair ran on a topic whose records arrived long ago).
ALTER TABLE repairs DROP CONSTRAINT repairs_status_check;
ALTER TABLE repairs ADD CONSTRAINT repairs_status_check
    CHECK (status IN ('running', 'ok', 'mismatch', 'lagging', 'failed'));
