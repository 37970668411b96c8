"""The automatic batch cap: what the driver's memory holds of records of a size (no services)."""

from __future__ import annotations

from spark_jobs.batch_size import (
    FROZEN_BYTES,
    FROZEN_PER_BYTE,
    FROZEN_SHARE,
    LARGEST,
    RESERVED_BYTES,
    SMALLEST,
    cap_for,
)

GIB = 1024**3


def test_the_cap_is_a_share_of_sparks_unified_memory_over_a_records_frozen_bytes() -> None:
    record = 200
    expected = (2 * GIB - RESERVED_BYTES) * 0.6 * FROZEN_SHARE / (FROZEN_BYTES + FROZEN_PER_BYTE * record)
    assert cap_for(2 * GIB, 0.6, record) == int(expected)
    # The bench's records (186 bytes) on the 2 GiB driver tidemark starts: its 1M events in one batch.
    assert 1_000_000 < cap_for(2 * GIB, 0.6, 186) < 1_300_000


def test_larger_records_and_smaller_heaps_make_smaller_batches_within_the_bounds() -> None:
    assert cap_for(2 * GIB, 0.6, 2_000) < cap_for(2 * GIB, 0.6, 200) < cap_for(8 * GIB, 0.6, 200)
    assert cap_for(512 * 1024**2, 0.6, 60_000) == SMALLEST  # a small heap and large records: never below
    assert cap_for(256 * GIB, 0.6, 10) == LARGEST  # a huge heap: never one giant frozen batch
    assert cap_for(RESERVED_BYTES // 2, 0.6, 200) == SMALLEST  # less than Spark reserves
