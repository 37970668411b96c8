"""A scheduled run's batches are about equal in size and none is above the cap."""

from __future__ import annotations

import math
import random

from spark_jobs.streaming import even_limit


def spark_batches(remaining: list[int], limit: int) -> list[int]:
    """Batch sizes Spark's Kafka source plans for partitions with ``remaining`` records each under
    ``maxOffsetsPerTrigger=limit`` (KafkaMicroBatchStream.rateLimit: each partition's share of the
    limit by what it has left, rounded down, or up when below one)."""
    remaining, sizes = list(remaining), []
    while sum(remaining) > 0:
        total = sum(remaining)
        if total <= limit:
            taken = remaining
        else:
            shares = [limit * left / total for left in remaining]
            taken = [
                min(left, math.ceil(s) if s < 1 else math.floor(s)) for left, s in zip(remaining, shares, strict=True)
            ]
        sizes.append(sum(taken))
        remaining = [left - t for left, t in zip(remaining, taken, strict=True)]
    return sizes


def test_twice_the_cap_in_three_partitions_is_three_even_batches_not_two_full_and_a_few() -> None:
    remaining = [333_334, 333_333, 333_333]
    assert spark_batches(remaining, 500_000) == [499_999, 499_998, 3]  # the cap as Spark's limit
    sizes = spark_batches(remaining, even_limit(sum(remaining), len(remaining), 500_000))
    assert len(sizes) == 3 and max(sizes) - min(sizes) <= 6, sizes


def test_a_backlog_within_the_cap_is_one_batch() -> None:
    assert even_limit(400, 3, 500) == 500
    assert spark_batches([100, 150, 150], even_limit(400, 3, 500)) == [400]


def test_random_backlogs_split_into_the_fewest_even_batches_the_cap_allows() -> None:
    rng = random.Random(47)
    for _ in range(2_000):
        partitions = rng.randint(1, 8)
        cap = rng.randint(partitions, 5_000)
        remaining = [rng.randint(0, 4 * cap) for _ in range(partitions)]
        backlog = sum(remaining)
        sizes = spark_batches(remaining, even_limit(backlog, partitions, cap))
        assert sum(sizes) == backlog
        assert max(sizes, default=0) <= cap + partitions, (remaining, cap, sizes)  # Spark rounds tiny shares up
        if len(sizes) > 1:
            # Equal shares: the last batch is short by at most what the rounding could lose per batch.
            assert sizes[-1] >= backlog / len(sizes) - len(sizes) * partitions, (remaining, cap, sizes)
            # Within one batch of the fewest the cap allows, or the rounding loss made it impossible.
            assert len(sizes) <= math.ceil(backlog / max(1, cap - partitions + 1)), (remaining, cap, sizes)
