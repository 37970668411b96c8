"""The note a batch's takeovers leave in the lake before their first Delta write (``spark_jobs.moves``)."""

from __future__ import annotations

from spark_jobs import moves
from spark_jobs.moves import moved_spans
from spark_jobs.offsets import PartitionRange
from spark_jobs.settings import Settings


def test_a_note_is_read_back_as_written_per_batch_and_gone_once_forgotten(spark_session, tmp_path) -> None:
    settings = Settings(home=tmp_path, lake_root=f"file://{tmp_path}/lake")
    batch, other = "tidemark/ingest:t/1/0123456789abcdef", "tidemark/ingest:t/2/0123456789abcdef"
    rows = [("t", 1, 7, 1_700_000_000_000_001), ("t", 0, 2, 1_700_000_000_000_000)]
    assert moves.recorded(spark_session, settings, batch) == []

    moves.record(spark_session, settings, batch, rows)
    assert moves.recorded(spark_session, settings, batch) == sorted(rows)
    assert moves.recorded(spark_session, settings, other) == []
    moves.forget(spark_session, settings, batch)
    assert moves.recorded(spark_session, settings, batch) == []


def test_the_moved_spans_run_from_the_first_to_the_last_displaced_offset_per_partition() -> None:
    rows = [("t", 0, 9, 0), ("t", 1, 4, 0), ("t", 0, 2, 0), ("t", 0, 5, 0)]
    assert moved_spans(rows) == [PartitionRange("t", 0, 2, 10), PartitionRange("t", 1, 4, 5)]
    assert moved_spans([]) == []
