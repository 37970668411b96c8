"""Records Kafka's retention removed before a scheduled pipeline read them: found before the run, acknowledged.

A scheduled pipeline reads every partition from its first offset (0) on, each batch where the
previous one ended. Before the stream starts, :func:`check_start` compares, per partition, the
next offset the pipeline needs with the broker's low watermark:

- a partition the pipeline never read (its first run, or a partition added since) needs offset 0,
  or the start an earlier attempt of its first run recorded;
- a partition it read needs the end of its last ledger range.

Offsets below the low watermark are gone (retention, or delete-records). The run then fails before
any work with :func:`loss_error`, unless the operator acknowledges the loss (``tidemark ingest
--allow-data-loss``, the ``allow_data_loss`` param of ``tidemark_ingest``): the lost ranges go into
the ledger (``retention_losses``), the run continues from the low watermark, and reconcile reports
them in every run (``lost before the first run`` / ``lost to retention``), never as a gap or a
mismatch. The first run of each partition also records where it started (``pipeline_starts``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from spark_jobs.errors import DataLossError
from spark_jobs.offsets import PartitionRange


@dataclass(frozen=True, order=True)
class Loss:
    """Offsets [start, end) of a partition the broker no longer held when ``pipeline`` needed them."""

    pipeline: str
    topic: str
    partition: int
    start: int
    end: int
    before_first_run: bool  # the pipeline had never read the partition
    during_run: bool = False  # removed while a run that had acknowledged another loss read towards them

    def describe(self) -> str:
        where = f"topic {self.topic} partition {self.partition} offsets [{self.start}, {self.end})"
        if self.during_run:
            return (
                f"lost to retention during a run: {where}: removed while {self.pipeline} was reading towards them "
                "(found by the batch that should have read them; nobody acknowledged them)"
            )
        if self.before_first_run:
            return (
                f"lost before the first run: {where}: Kafka's retention removed them before {self.pipeline} first "
                "read the partition (acknowledged)"
            )
        return f"lost to retention: {where}: removed before {self.pipeline} read them (acknowledged)"

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": "lost",
            "pipeline": self.pipeline,
            "topic": self.topic,
            "partition": self.partition,
            "start": self.start,
            "end": self.end,
            "before_first_run": self.before_first_run,
            "during_run": self.during_run,
        }


@dataclass(frozen=True)
class StartCheck:
    """What a scheduled run found before its stream started."""

    needed: dict[int, int]  # partition -> the next offset the pipeline must read
    first_run: bool  # the pipeline has read nothing yet: its stream starts at :attr:`starting_offsets`
    first_offsets: dict[int, int]  # partition -> where the pipeline's first batch of it starts, where known
    first_starts: dict[int, tuple[int, int]] = field(default_factory=dict)  # new partition -> (start, low watermark)
    losses: list[Loss] = field(default_factory=list)
    pending_loss: bool = False  # the frozen, uncommitted batch lost offsets: it records them itself
    # Losses earlier runs acknowledged before reading on (not those found inside a batch): a batch
    # Spark froze before, to be retried, may start inside one, and started past it then.
    acknowledged: list[Loss] = field(default_factory=list)

    @property
    def skips_removed(self) -> bool:
        """The run acknowledged removed offsets: its stream skips them, and each batch records the
        ones it should have read and finds neither in Kafka nor in the record tables."""
        return bool(self.losses) or self.pending_loss

    def left_to_unrecorded(self, starts: Mapping[int, int], ends: Mapping[int, int]) -> StartCheck:
        """This check with the part of each loss inside the batches the checkpoint froze and the
        ledger lacks left to those batches (partition -> where the first starts, where the last
        ends). An attempt of theirs may have written records there before retention removed them:
        each batch finds those in the record tables, and records as lost only what neither Kafka
        nor the tables hold. The parts below and above stay losses of this check (below, no batch
        will read them: PostgreSQL restored under a crashed run lost the ledger rows of the loss)."""
        kept = []
        for loss in self.losses:
            start = starts.get(loss.partition, loss.start)
            end = ends.get(loss.partition, loss.start)
            if loss.start < start:
                kept.append(replace(loss, end=min(loss.end, start)))
            if max(loss.start, end) < loss.end:
                kept.append(replace(loss, start=max(loss.start, end)))
        return replace(self, losses=kept, pending_loss=self.pending_loss or kept != self.losses)

    @property
    def starting_offsets(self) -> dict[int, int]:
        """Where the stream starts each partition: what it needs, or the low watermark past a loss."""
        return {p: max(needed, self.loss_ends.get(p, needed)) for p, needed in self.needed.items()}

    @property
    def loss_ends(self) -> dict[int, int]:
        ends: dict[int, int] = {}
        for loss in self.losses:
            ends[loss.partition] = max(loss.end, ends.get(loss.partition, loss.end))
        return ends

    def past_loss(self, partition: int, offset: int) -> int:
        """``offset``, or the end of the acknowledged loss it falls in (this run's, or an earlier run's):
        where a batch starting there really starts. A batch an earlier run froze and started past a
        loss it acknowledged, and that crashed after it committed, starts there again on the retry
        (the ledger holds it with that range)."""
        for loss in [*self.losses, *self.acknowledged]:
            if loss.partition == partition and loss.start <= offset < loss.end:
                return loss.end
        return offset


def check_start(
    pipeline: str,
    topic: str,
    held: Mapping[int, tuple[int, int]],
    read_to: Mapping[int, int],
    recorded_starts: Mapping[int, int],
) -> StartCheck:
    """Compare what the pipeline needs with what the broker holds (``held``: partition -> (low, high)).

    ``read_to``: per partition, the end of the pipeline's last ledger range; ``recorded_starts``:
    the starts its first run recorded. Pure: the caller reads those and records the outcome.
    """
    needed: dict[int, int] = {}
    first_starts: dict[int, tuple[int, int]] = {}
    losses = []
    for partition, (low, _high) in sorted(held.items()):
        need = read_to.get(partition, recorded_starts.get(partition, 0))
        needed[partition] = need
        if partition not in read_to and partition not in recorded_starts:
            first_starts[partition] = (max(need, low), low)
        if low > need:
            losses.append(Loss(pipeline, topic, partition, need, low, before_first_run=partition not in read_to))
    first_offsets = dict(recorded_starts) | {p: start for p, (start, _low) in first_starts.items()}
    return StartCheck(needed, not read_to, first_offsets, first_starts, losses)


def loss_error(losses: list[Loss]) -> DataLossError:
    """One line: which offsets are gone, that nothing was written, and how to acknowledge it."""
    first = all(loss.before_first_run for loss in losses)
    spans = ", ".join(f"partition {loss.partition} offsets [{loss.start}, {loss.end})" for loss in losses)
    when = "before the first run" if first else "since the last run"
    return DataLossError(
        f"topic {losses[0].topic}: {spans} were removed by Kafka's retention {when} of {losses[0].pipeline}; "
        "nothing was written. If they are gone for good, acknowledge it: `tidemark ingest "
        "--allow-data-loss` (or trigger tidemark_ingest with allow_data_loss) records them as lost and continues "
        "from the first offset the broker holds; reconcile reports them."
    )


# ---------------------------------------------------------------------------------------------
# The ledger's side


def positions(cur, pipeline: str, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """(read_to, recorded_starts) of :func:`check_start`, from the ledger."""
    cur.execute(
        """SELECT kafka_partition, max(end_offset) FROM ledger_ranges
           WHERE pipeline = %s AND topic = %s GROUP BY kafka_partition""",
        (pipeline, topic),
    )
    read_to = {int(p): int(end) for p, end in cur.fetchall()}
    cur.execute(
        "SELECT kafka_partition, start_offset FROM pipeline_starts WHERE pipeline = %s AND topic = %s",
        (pipeline, topic),
    )
    return read_to, {int(p): int(start) for p, start in cur.fetchall()}


def record(cur, pipeline: str, topic: str, check: StartCheck, acknowledged: bool) -> None:
    """Record the first starts of new partitions and, when ``acknowledged``, the losses."""
    cur.executemany(
        """INSERT INTO pipeline_starts (pipeline, topic, kafka_partition, start_offset, low_watermark)
           VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING""",
        [(pipeline, topic, p, start, low) for p, (start, low) in check.first_starts.items()],
    )
    if acknowledged:
        record_losses(cur, check.losses)


def record_losses(cur, losses: list[Loss]) -> None:
    """Record ``losses`` in the ledger (a loss recorded before is widened, never narrowed)."""
    cur.executemany(
        """INSERT INTO retention_losses (pipeline, topic, kafka_partition, start_offset, end_offset,
                                         before_first_run, during_run)
           VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (pipeline, topic, kafka_partition, start_offset)
           DO UPDATE SET end_offset = greatest(retention_losses.end_offset, EXCLUDED.end_offset)""",
        [(x.pipeline, x.topic, x.partition, x.start, x.end, x.before_first_run, x.during_run) for x in losses],
    )


def record_acknowledged(cur, losses: list[Loss]) -> None:
    """Record gaps an operator acknowledged as ``losses``; a loss recorded at the same start stays as it was."""
    cur.executemany(
        """INSERT INTO retention_losses (pipeline, topic, kafka_partition, start_offset, end_offset, before_first_run)
           VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING""",
        [(x.pipeline, x.topic, x.partition, x.start, x.end, x.before_first_run) for x in losses],
    )


def lost_in_batch(
    pipeline: str,
    ranges: list[PartitionRange],
    read: list[PartitionRange],
    held: Mapping[int, tuple[int, int]],
    during_run: bool = True,
) -> list[Loss]:
    """What retention removed from a batch's ``ranges`` before the batch read it, in a run that
    skips removed offsets (one that acknowledged a loss): per partition, the offsets of the range
    the batch did not ``read`` (its runs of consecutive offsets, held ones included) that lie below
    the low watermark now (``held``). Gone, and never read. (Between transactions a topic has offsets
    that hold no record; below the low watermark they cannot be told apart, so they count as lost.)
    ``during_run``: found by a scheduled run's batch (a backfill's are the ones its plan skipped,
    acknowledged). Pure."""
    losses = []
    for r in ranges:
        low = min(held.get(r.partition, (0, 0))[0], r.end)
        position = r.start
        runs = sorted((x.start, x.end) for x in read if (x.topic, x.partition) == (r.topic, r.partition))
        for start, end in [*runs, (low, low)]:
            gap_end = min(start, low)
            if gap_end > position:
                losses.append(Loss(pipeline, r.topic, r.partition, position, gap_end, False, during_run=during_run))
            position = max(position, end)
            if position >= low:
                break
    return losses


def recorded_losses(cur, pipeline: str | None = None) -> list[Loss]:
    """Every acknowledged loss (of ``pipeline``, or of all pipelines)."""
    cur.execute(
        """SELECT pipeline, topic, kafka_partition, start_offset, end_offset, before_first_run, during_run
           FROM retention_losses WHERE %s IS NULL OR pipeline = %s
           ORDER BY pipeline, topic, kafka_partition, start_offset""",
        (pipeline, pipeline),
    )
    return [Loss(*row) for row in cur.fetchall()]


def lost_per_partition(cur) -> dict[tuple[str, int], int]:
    """(topic, partition) -> offsets lost to retention, over every acknowledged loss."""
    cur.execute(
        """SELECT topic, kafka_partition, sum(end_offset - start_offset) FROM retention_losses
           GROUP BY 1, 2 ORDER BY 1, 2"""
    )
    return {(topic, partition): n for topic, partition, n in cur.fetchall()}
