"""Retention losses, pure: what a scheduled run needs against what the broker holds; how reconcile reports them."""

from __future__ import annotations

import pytest

from spark_jobs.store.findings import Gap, LedgerEntry, SessionsSummary, find_gaps
from spark_jobs.store.report import Report
from spark_jobs.store.retention import Loss, check_start, loss_error

PIPELINE = "ingest:events"


def test_a_first_run_on_a_topic_that_starts_at_zero_loses_nothing_and_records_its_starts() -> None:
    check = check_start(PIPELINE, "events", {0: (0, 10), 1: (0, 0)}, read_to={}, recorded_starts={})
    assert check.first_run and not check.losses
    assert check.first_starts == {0: (0, 0), 1: (0, 0)}
    assert check.starting_offsets == {0: 0, 1: 0}


def test_records_removed_before_the_first_run_are_a_loss_from_zero_to_the_low_watermark() -> None:
    check = check_start(PIPELINE, "events", {0: (120, 200), 1: (0, 5)}, read_to={}, recorded_starts={})
    assert check.losses == [Loss(PIPELINE, "events", 0, 0, 120, before_first_run=True)]
    assert check.first_starts == {0: (120, 120), 1: (0, 0)}
    assert check.starting_offsets == {0: 120, 1: 0}  # acknowledged, the stream starts at the low watermark


def test_a_run_continues_where_the_ledger_ends_and_a_removed_part_of_that_is_a_loss_between_runs() -> None:
    held = {0: (150, 200), 1: (0, 90)}
    check = check_start(PIPELINE, "events", held, read_to={0: 100, 1: 80}, recorded_starts={0: 0, 1: 0})
    assert not check.first_run and check.first_starts == {}
    assert check.losses == [Loss(PIPELINE, "events", 0, 100, 150, before_first_run=False)]
    assert check.starting_offsets == {0: 150, 1: 80}
    # Retention that removed only what was read already is no loss.
    assert not check_start(PIPELINE, "events", {0: (100, 200)}, read_to={0: 100}, recorded_starts={0: 0}).losses


def test_a_partition_added_since_the_first_run_must_start_at_zero_too() -> None:
    check = check_start(PIPELINE, "events", {0: (0, 50), 1: (7, 9)}, read_to={0: 50}, recorded_starts={0: 0})
    assert not check.first_run
    assert check.first_starts == {1: (7, 7)}
    assert check.losses == [Loss(PIPELINE, "events", 1, 0, 7, before_first_run=True)]


def test_a_first_run_that_failed_after_recording_its_start_is_checked_against_that_start() -> None:
    check = check_start(PIPELINE, "events", {0: (130, 200)}, read_to={}, recorded_starts={0: 120})
    assert check.first_starts == {}  # recorded already
    assert check.losses == [Loss(PIPELINE, "events", 0, 120, 130, before_first_run=True)]


def test_the_loss_error_is_one_line_that_names_the_offsets_and_the_acknowledgement() -> None:
    message = str(loss_error([Loss(PIPELINE, "events", 0, 0, 120, True), Loss(PIPELINE, "events", 2, 0, 3, True)]))
    assert "\n" not in message
    assert message.startswith(
        "topic events: partition 0 offsets [0, 120), partition 2 offsets [0, 3) were removed by Kafka's retention "
        "before the first run of ingest:events; nothing was written."
    )
    assert "nothing was written" in message and "--allow-data-loss" in message and "allow_data_loss" in message
    between = str(loss_error([Loss(PIPELINE, "events", 0, 100, 150, False)]))
    assert "since the last run" in between


def entry(batch: int, start: int, end: int) -> LedgerEntry:
    return LedgerEntry(PIPELINE, batch, "events", 0, start, end)


def test_an_acknowledged_loss_between_batches_is_not_a_gap_but_a_reported_finding() -> None:
    entries = [entry(0, 0, 100), entry(1, 150, 200)]
    assert find_gaps(entries) == [Gap(PIPELINE, "events", 0, 100, 150, 0, 1)]
    lost = Loss(PIPELINE, "events", 0, 100, 150, before_first_run=False)
    assert find_gaps(entries, [lost]) == []
    # Only what the loss covers: a wider hole is still a gap.
    assert find_gaps([entry(0, 0, 100), entry(1, 160, 200)], [lost]) == [Gap(PIPELINE, "events", 0, 100, 160, 0, 1)]

    sessions = SessionsSummary(3, 42)
    report = Report("r", [], [], sessions, sessions, losses=[lost, Loss(PIPELINE, "events", 1, 0, 9, True)])
    assert report.ok and report.status == "ok"
    assert "2 lost to retention" in report.headline()
    assert "- lost to retention: topic events partition 0 offsets [100, 150)" in report.summary()
    assert "- lost before the first run: topic events partition 1 offsets [0, 9)" in report.summary()
    assert [f["kind"] for f in report.findings()] == ["lost", "lost"]


@pytest.mark.parametrize("held", [{0: (0, 0)}, {0: (5, 5)}])
def test_an_empty_partition_needs_nothing_it_never_held(held: dict[int, tuple[int, int]]) -> None:
    low = held[0][0]
    check = check_start(PIPELINE, "events", held, read_to={0: low}, recorded_starts={0: 0})
    assert not check.losses


def test_a_replayed_first_batch_starts_where_the_pipeline_started_not_where_the_ledger_ends() -> None:
    # Batch 0 ([0, 81)) is in the ledger, but Spark did not commit it: the retry replays it.
    check = check_start(PIPELINE, "events", {0: (0, 300)}, read_to={0: 81}, recorded_starts={0: 0})
    assert check.first_offsets == {0: 0} and check.needed == {0: 81}
    assert check.past_loss(0, 0) == 0


def test_only_a_batch_that_starts_inside_an_acknowledged_loss_moves_past_it() -> None:
    check = check_start(PIPELINE, "events", {0: (100, 300)}, read_to={0: 81}, recorded_starts={0: 0})
    assert check.losses == [Loss(PIPELINE, "events", 0, 81, 100, before_first_run=False)]
    assert check.past_loss(0, 0) == 0  # a replay of the batch before the loss keeps its range
    assert check.past_loss(0, 81) == 100
    assert check.past_loss(0, 150) == 150
    assert check.past_loss(1, 81) == 81


def test_a_frozen_uncommitted_batch_takes_only_the_part_of_a_loss_inside_its_range() -> None:
    check = check_start(PIPELINE, "events", {0: (40, 300), 1: (0, 50)}, read_to={}, recorded_starts={})
    # The batch covers [20, 30) of the loss [0, 40) of partition 0: the crashed attempt may hold
    # some of it. Below it (PostgreSQL restored: the ledger lost the batches before) and above it
    # the loss stays this check's to record.
    left = check.left_to_unrecorded({0: 20, 1: 0}, {0: 30, 1: 10})
    assert left.losses == [
        Loss(PIPELINE, "events", 0, 0, 20, before_first_run=True),
        Loss(PIPELINE, "events", 0, 30, 40, before_first_run=True),
    ]
    assert left.skips_removed and left.pending_loss and left.loss_ends == {0: 40}
    # A batch that starts where the ledger ends takes the whole loss, or its part below its end.
    assert check.left_to_unrecorded({0: 0}, {0: 50}).losses == []
    assert check.left_to_unrecorded({0: 0}, {0: 25}).losses == [
        Loss(PIPELINE, "events", 0, 25, 40, before_first_run=True)
    ]
    # A batch entirely past the loss takes none of it.
    past = check.left_to_unrecorded({0: 40}, {0: 60})
    assert past.losses == check.losses and not past.pending_loss


def test_a_batch_records_as_lost_what_it_skipped_below_the_low_watermark() -> None:
    from spark_jobs.offsets import PartitionRange
    from spark_jobs.store.retention import lost_in_batch

    def r(partition: int, start: int, end: int) -> PartitionRange:
        return PartitionRange("events", partition, start, end)

    def lost(partition: int, start: int, end: int) -> Loss:
        return Loss(PIPELINE, "events", partition, start, end, before_first_run=False, during_run=True)

    ranges = [r(0, 40, 60), r(1, 10, 20), r(2, 5, 9), r(3, 0, 30)]
    read = [r(1, 15, 20), r(2, 5, 9), r(3, 0, 4), r(3, 25, 30)]  # partition 0: nothing read
    held = {0: (70, 100), 1: (12, 30), 2: (0, 9), 3: (25, 40)}
    assert lost_in_batch(PIPELINE, ranges, read, held) == [
        lost(0, 40, 60),  # all of it, below 70
        lost(1, 10, 12),  # [12, 15) is still held: no record there, nothing lost
        lost(3, 4, 25),  # skipped in the middle
    ]


def test_a_backfill_that_skips_removed_offsets_covers_what_was_asked_and_its_losses_are_acknowledged() -> None:
    from spark_jobs.offsets import PartitionRange
    from spark_jobs.planning import BackfillPlan
    from spark_jobs.store.retention import lost_in_batch

    def r(partition: int, start: int, end: int) -> PartitionRange:
        return PartitionRange("events", partition, start, end)

    # Asked for 0:0-40, 1:5-10 and 2:0-50; the broker holds partition 0 from 30, 1 from 12, 2 from 0.
    plan = BackfillPlan([r(0, 30, 40), r(1, 10, 10), r(2, 0, 50)], skipped=[r(0, 0, 30), r(1, 5, 10)])
    assert plan.asked == [r(0, 0, 40), r(1, 5, 10), r(2, 0, 50)]
    # An earlier attempt holds [0, 12) of partition 0: only the rest of the skipped part is lost.
    read = [r(0, 0, 12), r(0, 30, 40), r(2, 0, 50)]
    assert lost_in_batch(PIPELINE, plan.asked, read, {0: (30, 40), 1: (12, 12), 2: (0, 50)}, during_run=False) == [
        Loss(PIPELINE, "events", 0, 12, 30, before_first_run=False),
        Loss(PIPELINE, "events", 1, 5, 10, before_first_run=False),
    ]
