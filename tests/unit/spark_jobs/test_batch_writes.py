"""The Delta transaction identifiers of a batch's writes (spark_jobs.batch_writes.batch_write_id)."""

from __future__ import annotations

from spark_jobs.batch_writes import batch_write_id
from spark_jobs.offsets import PartitionRange

RANGES = [PartitionRange("clicks", 0, 0, 20), PartitionRange("clicks", 1, 5, 9)]


def test_a_scheduled_batch_and_a_backfill_of_the_same_ranges_share_each_writes_identifier() -> None:
    """Whichever of the two commits a table's write first, the other's is skipped: a writer fenced while its
    write was in flight adds nothing beside the backfill that took over."""
    scheduled = batch_write_id("ingest:clicks", 7, RANGES, "events")
    assert batch_write_id("backfill:clicks", 0, list(reversed(RANGES)), "events") == scheduled
    assert batch_write_id("ingest:clicks", 7, RANGES, "duplicates") != scheduled  # each table its own
    assert batch_write_id("ingest:clicks", 7, RANGES[:1], "events") != scheduled  # other ranges: other records


def test_readmits_and_repairs_keep_identifiers_of_their_own() -> None:
    landing = batch_write_id("ingest:clicks", 0, RANGES, "events")
    readmit = batch_write_id("readmit:clicks", 0, RANGES, "events", scope="readmit-1")
    repair = batch_write_id("repair:clicks", 0, RANGES, "events", scope="repair-1")
    assert len({landing, readmit, repair}) == 3
    assert batch_write_id("repair:clicks", 0, RANGES, "events", scope="repair-2") != repair
