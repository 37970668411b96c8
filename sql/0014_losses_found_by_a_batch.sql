-- Records retention removed while a run that had acknowledged an earlier loss was reading towards
-- them (Spark's failOnDataLoss is off for such a run, so it skips them): the batch that should
-- have read them records them here, with its ledger row. Not acknowledged by anyone, and listed by
-- every reconcile report as such.
ALTER TABLE retention_losses ADD COLUMN during_run boolean NOT NULL DEFAULT false;
