"""A pure-Python reference of tidemark's semantics, and random scenarios to check the real pipeline with.

The reference knows nothing of batches, ledgers or retries: from the records processed so far it
says where each one belongs and which sessions follow. Whatever order the real pipeline processed
them in (scheduled runs in small batches, backfills over any ranges, crashes after any subset of
the table commits and their retries), its tables must say the same.

* ``quarantine``: the invalid records, and those of a release the contract does not know yet
  (``pending``) until the contract is fixed and they are processed, or readmitted (``admitted``);
* ``events``: per event_id, the first valid record in arrival order (Kafka timestamp, partition,
  offset); ``duplicates``: every other valid record;
* ``sessions``: ``events`` per entity in arrival order, cut at a gap longer than the rules' gap
  and at the maximum length (:func:`spark_jobs.sessionize.split_sessions`), each identified by
  :func:`spark_jobs.sessionize.session_id`.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from spark_jobs.contract import SessionRules
from spark_jobs.sessionize import session_id, split_sessions
from tests.integration.spark_jobs.checks import InjectedCrash

# Short rules, so that a few hundred records reach both the gap and the maximum length.
RULES = SessionRules(gap=timedelta(minutes=10), max_length=timedelta(hours=1))
START = datetime(2026, 10, 24, 22, tzinfo=UTC)  # the scenarios cross Europe/Berlin's clock change
FAULT_WRITES = ("write:quarantine", "write:duplicates", "write:events", "write:sessions")
# Every point of a batch a crash may strike (writer.FAULT_POINTS; a readmit's batch also leaves quarantine).
EVERY_POINT = ("planned", *FAULT_WRITES, "write:quarantine:readmitted", "after_delta", "after_postgres")
# How a run's pipeline is selected: its settings as the code builds them (for_pipeline), the README's variable
# TIDEMARK_PIPELINE (with TIDEMARK_TOPIC still the default pipeline's), or --pipeline and --topic.
SELECTIONS = ("settings", "variable", "flag")
# A producer release's event type, which the model's contract (event_type "click" only) learns in a Fix step.
RELEASE_TYPE = "signup"
CONTRACT_TYPES = ["click"]


@dataclass(frozen=True)
class Record:
    """One record as produced; ``offset`` is known once the broker acknowledged it."""

    partition: int
    arrival_ms: int  # the Kafka (CreateTime) timestamp
    entity_id: str  # the key, and the entity of the value when it has one
    event_id: str | None  # None: malformed, quarantined
    event_time_ms: int
    offset: int = -1
    pending: bool = False  # of the release: valid once the contract is fixed (and it is processed or readmitted)

    @property
    def valid(self) -> bool:
        return self.event_id is not None

    @property
    def coordinates(self) -> tuple[int, int]:
        return self.partition, self.offset

    def value(self) -> bytes:
        if self.event_id is None:
            # Not JSON; cut off; or two whole events in one value (Spark's parser reads only the first).
            # Chosen by the (random) event time: the offset is not known yet when the value is produced.
            name = f"packed{self.event_time_ms}"
            packed = self._json(name) + b"\n" + self._json(f"{name}b")
            return (b"not json at all", b'{"event_id": "broken", "entity_id": ', packed)[self.event_time_ms // 1000 % 3]
        return self._json(self.event_id)

    def _json(self, event_id: str) -> bytes:
        event_time = datetime.fromtimestamp(self.event_time_ms / 1000, UTC)
        return json.dumps(
            {
                "event_id": event_id,
                "entity_id": self.entity_id,
                "event_type": RELEASE_TYPE if self.pending else "click",
                "event_time": event_time.isoformat(timespec="milliseconds"),
                "n": self.event_time_ms % 1_000,  # an integer an Edit may declare as a typed column
            }  # fmt: skip
        ).encode()


def _text(ms: int) -> str:
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}000"  # microseconds, as the sinks' text


@dataclass(frozen=True)
class Expected:
    events: set[tuple[int, int]]
    duplicates: set[tuple[int, int]]
    quarantine: set[tuple[int, int]]
    sessions: set[str]  # rows in sinks.delta.SESSION_ROW_TEXT / sinks.postgres.SESSION_ROW_TEXT form


def expected(
    records: list[Record],
    processed: set[tuple[int, int]],
    rules: SessionRules = RULES,
    admitted: set[tuple[int, int]] | frozenset = frozenset(),
) -> Expected:
    """Where the processed records belong, and the sessions that follow, computed from scratch.
    ``admitted``: the release's records the contract accepted (processed after its fix, or readmitted)."""
    seen = [r for r in records if r.coordinates in processed]

    def accepted(r: Record) -> bool:
        return r.valid and (not r.pending or r.coordinates in admitted)

    quarantine = {r.coordinates for r in seen if not accepted(r)}
    first: dict[str | None, Record] = {}  # by event_id (an accepted record has one)
    duplicates = set()
    for r in sorted((r for r in seen if accepted(r)), key=lambda r: (r.arrival_ms, r.partition, r.offset)):
        if r.event_id in first:
            duplicates.add(r.coordinates)
        else:
            first[r.event_id] = r
    sessions = set()
    by_entity: dict[str, list[Record]] = {}
    for r in first.values():
        by_entity.setdefault(r.entity_id, []).append(r)
    for entity, rows in by_entity.items():
        rows.sort(key=lambda r: (r.arrival_ms, r.partition, r.offset))
        numbers = split_sessions([datetime.fromtimestamp(r.arrival_ms / 1000, UTC) for r in rows], rules)
        for number in sorted(set(numbers)):
            members = [r for r, n in zip(rows, numbers, strict=True) if n == number]
            start, end = members[0].arrival_ms, members[-1].arrival_ms
            sessions.add(
                "|".join(
                    (
                        session_id(entity, start),
                        entity,
                        _text(start),
                        _text(end),
                        _text(members[0].event_time_ms),
                        _text(members[-1].event_time_ms),
                        str(len(members)),
                        f"{(end - start) / 1000:.6f}",
                    )
                )  # fmt: skip
            )
    return Expected({r.coordinates for r in first.values()}, duplicates, quarantine, sessions)


# -- scenarios -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Produce:
    records: list[Record]

    def __str__(self) -> str:
        rows = ", ".join(
            f"p{r.partition}@{(r.arrival_ms - _ms(START)) // 1000}s:{r.entity_id}/{r.event_id or 'MALFORMED'}"
            for r in self.records
        )
        return f"produce {len(self.records)}: {rows}"


@dataclass(frozen=True)
class Crash:
    """Fail the ``batch``-th batch a run writes (0 = its first) at ``points`` (writer.FAULT_POINTS).

    Before the retry, ``restore`` puts PostgreSQL back to a dump taken before the run (a restore
    from a backup: attempt rows, ledger rows and sessions of the crashed run are gone), and
    ``maintain`` compacts and vacuums every table.

    ``takeover`` (backfills): instead of failing, the run stops inside its first Delta write;
    a second run of the same backfill waits for the writer lock; every PostgreSQL backend of the
    first dies (a failover), the second takes over and commits; then the first wakes and writes on,
    and must fail without adding anything."""

    points: tuple[str, ...]
    batch: int
    restore: bool = False
    maintain: bool = False
    takeover: bool = False

    def hook(self):  # -> writer.Fault
        written = [0]

        def fault(point: str) -> None:
            if written[0] == self.batch and point in self.points:
                raise InjectedCrash(f"injected crash at {point} of batch {self.batch}")
            if point == "after_postgres":
                written[0] += 1

        return fault


@dataclass(frozen=True)
class Scheduled:
    """A scheduled run; with ``erode``, retention removes records past its first batch while it runs."""

    max_offsets_per_trigger: int | None
    crash: Crash | None = None
    erode: bool = False
    select: str = "settings"  # one of SELECTIONS

    def __str__(self) -> str:
        erode = ", retention removes records while it runs" if self.erode else ""
        return (
            f"scheduled run (maxOffsetsPerTrigger={self.max_offsets_per_trigger}){_select_text(self.select)}{erode}"
            f"{_crash_text(self.crash)}"
        )


@dataclass(frozen=True)
class Backfill:
    offsets: dict[int, tuple[int, int]]  # partition -> [start, end)
    crash: Crash | None = None
    select: str = "settings"  # one of SELECTIONS

    def __str__(self) -> str:
        return f"backfill {self.offsets}{_select_text(self.select)}{_crash_text(self.crash)}"


@dataclass(frozen=True)
class Retention:
    """Kafka's retention removes the oldest records of some partitions (where it cuts is drawn when
    the scenario runs, :func:`retention_cuts`): processed ones stay in the sinks, the others are lost,
    and the next run must refuse until the loss is acknowledged, then record it."""

    def __str__(self) -> str:
        return "retention removes old records"


@dataclass(frozen=True)
class Tamper:
    """Damage to the sinks (a Delta ``events`` row deleted or changed, a PostgreSQL session deleted):
    reconcile must find it and its repair put everything back. With ``undo``, the damage is undone
    before the repair: the finding is stale, and the repair must leave the sinks as they are."""

    what: str  # one of TAMPERS
    undo: bool
    crash: Crash | None = None  # the repair crashes (then repairs again)

    def __str__(self) -> str:
        repair = "repair" if self.crash is None else f"repair{_crash_text(self.crash)}"
        return f"tamper: {self.what}{', undone before the repair' if self.undo else ''}; reconcile; {repair}"


@dataclass(frozen=True)
class Recreate:
    """The topic is deleted and created again, and new records arrive: a run, a backfill and
    reconcile must each refuse before any work (the last step of a scenario)."""

    def __str__(self) -> str:
        return "the topic is deleted and created again"


@dataclass(frozen=True)
class Fix:
    """The contract learns the release's event type (a compatible change of the pipelines file)."""

    def __str__(self) -> str:
        return f"the contract is fixed: event_type {RELEASE_TYPE!r} is accepted from now on"


@dataclass(frozen=True)
class Readmit:
    """Readmit every quarantined record (crashing first, then done again, if ``crash``); reconcile agrees."""

    crash: Crash | None = None

    def __str__(self) -> str:
        return f"readmit the quarantined records the contract accepts now; reconcile{_crash_text(self.crash)}"


@dataclass(frozen=True)
class Edit:
    """An edit of the pipeline's entry in the pipelines file between runs (one of EDITS):

    * ``add a typed column``: ``n`` as ``int`` (a compatible change: the next run adds the column);
    * ``change the column's type``: ``n`` as ``bigint`` once the table holds it as ``int``: the next run
      is refused with one line naming the column, before any write; the edit is then undone;
    * ``change the session rules``: before a readmit, which is refused before its first write; undone."""

    what: str

    def __str__(self) -> str:
        return f"the pipelines file is edited: {self.what}"


EDITS = ("add a typed column", "change the column's type", "change the session rules")
TAMPERS = ("delete an event", "change an event", "delete a session")


SELECTED_BY = {
    "settings": "",
    "variable": ", selected by TIDEMARK_PIPELINE",
    "flag": ", selected by --pipeline and --topic",
}


def _select_text(select: str) -> str:
    return SELECTED_BY[select]


def _crash_text(crash: Crash | None) -> str:
    if crash is None:
        return ""
    if crash.takeover:
        return ", a failover inside its Delta writes while another run waits: taken over"
    between = "".join(
        f", {what}" for what, on in (("PostgreSQL restored", crash.restore), ("maintenance", crash.maintain)) if on
    )
    return f", crash at {'+'.join(crash.points)} of batch {crash.batch}{between}, then retried"


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@dataclass
class Scenario:
    seed: int
    partitions: int
    steps: list[Produce | Scheduled | Backfill | Retention | Tamper | Edit | Fix | Readmit | Recreate] = field(
        default_factory=list
    )
    rules: SessionRules = RULES

    def __str__(self) -> str:
        lines = [f"seed {self.seed}: {self.partitions} partition(s), rules {self.rules}"]
        lines += [f"  {i}. {step}" for i, step in enumerate(self.steps)]
        return "\n".join(lines)


def generate(seed: int, prefix: str = "") -> Scenario:
    """A random scenario: records with duplicates (some carrying another entity, some stamped before
    the original, which takes the original's place), timestamps that go back, malformed values;
    scheduled runs and backfills, some crashing after a random subset of the table commits.
    Backfill ranges are chosen when the scenario runs (they need the offsets)."""
    rng = random.Random(seed)
    # The faults and rules added since draw from streams of their own: older seeds keep their records.
    more = random.Random(seed * 7_919 + 1)
    ops = random.Random(seed * 104_729 + 2)  # retention, tampering, takeovers, a re-created topic
    gap = RULES.gap + timedelta(milliseconds=more.choice((0, 0, 500, 7_250, 59_999)))
    scenario = Scenario(seed, partitions=rng.choice((1, 2, 3)), rules=SessionRules(gap, RULES.max_length))
    entities = [f"{prefix}u{i}" for i in range(rng.randint(2, 5))]
    clock = _ms(START)
    sent: list[Record] = []
    runs = rng.randint(2, 4)
    for run in range(runs):
        records = []
        for _ in range(rng.randint(4, 20)):
            clock += rng.choice((0, 1_000, 60_000, 4 * 60_000, 9 * 60_000, 11 * 60_000, 25 * 60_000))
            arrival = clock - rng.randint(1, 90) * 60_000 if rng.random() < 0.15 else clock  # goes back
            entity = rng.choice(entities)
            event_time = arrival - rng.randint(0, 3_600_000)
            roll = rng.random()
            if roll < 0.08:
                event_id = None
            elif roll < 0.30 and sent:
                copy = rng.choice(sent)
                event_id, event_time = copy.event_id, copy.event_time_ms
                entity = copy.entity_id if rng.random() < 0.75 else entity  # sometimes another entity
                if rng.random() < 0.4:  # a copy stamped before the original: a takeover when it was stored
                    arrival = copy.arrival_ms - rng.randint(1, 30) * 60_000
            else:
                event_id = f"{prefix}e{len(sent)}"
            record = Record(entities.index(entity) % scenario.partitions, arrival, entity, event_id, event_time)
            records.append(record)
            if event_id is not None:
                sent.append(record)
        scenario.steps.append(Produce(records))
        if ops.random() < 0.2:
            scenario.steps.append(Retention())
        crash = _random_crash(rng) if rng.random() < 0.75 else None
        if crash is not None:
            crash = replace(crash, restore=more.random() < 0.25, maintain=more.random() < 0.25)
        if run == runs - 1 or rng.random() < 0.6:
            cap = rng.choice((None, 6, 15))
            scenario.steps.append(Scheduled(cap, crash, erode=cap is not None and ops.random() < 0.3))
        else:
            if crash is not None and ops.random() < 0.35:
                crash = Crash(("write",), batch=0, takeover=True)
            scenario.steps.append(Backfill({}, crash))  # ranges drawn by choose_ranges
        if ops.random() < 0.25:
            scenario.steps.append(Tamper(ops.choice(TAMPERS), undo=ops.random() < 0.3))
    _release(scenario, random.Random(seed * 31_337 + 4), entities, clock, sent, prefix)
    _edits(scenario, random.Random(seed * 130_363 + 5))
    if ops.random() < 0.15:
        scenario.steps.append(Recreate())
    return scenario


def _release(
    scenario: Scenario, rng: random.Random, entities: list[str], clock: int, sent: list[Record], prefix: str
) -> None:
    """Half the scenarios: some records are of a producer release the contract does not know (quarantined);
    at the end the contract is fixed, maybe more records arrive and are processed, an event is damaged
    and repaired (sometimes: the repair readmits first the quarantined records of the range it clears),
    and a readmit (crashing at a write first, sometimes) brings the other quarantined ones back."""
    if rng.random() >= 0.5:
        return
    for i, step in enumerate(scenario.steps):
        if isinstance(step, Produce):
            records = [replace(r, pending=r.valid and rng.random() < 0.2) for r in step.records]
            scenario.steps[i] = Produce(records)
    scenario.steps.append(Fix())
    if rng.random() < 0.5:  # after the fix, the release's records are accepted as they arrive
        records = []
        for _ in range(rng.randint(2, 6)):
            clock += rng.choice((1_000, 60_000, 11 * 60_000))
            copy = rng.choice(sent) if sent and rng.random() < 0.4 else None
            entity = copy.entity_id if copy else rng.choice(entities)
            event_id = copy.event_id if copy else f"{prefix}r{len(records)}"
            records.append(Record(entities.index(entity) % scenario.partitions, clock, entity, event_id,
                                  clock - rng.randint(0, 600_000), pending=rng.random() < 0.5))  # fmt: skip
        scenario.steps += [Produce(records), Scheduled(None)]
    points = (rng.choice((*FAULT_WRITES, "write:quarantine:readmitted", "after_delta")),)
    readmit = Readmit(Crash(points, batch=0) if rng.random() < 0.6 else None)
    if rng.random() < 0.5:  # a repair before the readmit re-reads quarantined records the fix accepts
        scenario.steps.append(Tamper("change an event", undo=False))
    scenario.steps.append(readmit)


def _edits(scenario: Scenario, rng: random.Random) -> None:
    """How each run selects its pipeline; crashes in repairs and at any point of a readmit; edits of the
    pipelines file between steps (a typed column added, its type changed, the session rules changed before a
    readmit). Drawn from a stream of their own, after the rest: the other steps of a seed stay as they were."""
    steps = scenario.steps
    for i, step in enumerate(steps):
        if isinstance(step, Scheduled | Backfill):
            steps[i] = replace(step, select=rng.choice(("settings", "settings", "variable", "flag")))
        elif isinstance(step, Tamper) and rng.random() < 0.4:
            steps[i] = replace(step, crash=Crash((rng.choice(EVERY_POINT),), batch=rng.choice((0, 0, 1))))
        elif isinstance(step, Readmit) and step.crash is not None and rng.random() < 0.5:
            points = tuple(p for p in EVERY_POINT if rng.random() < 0.3) or (rng.choice(EVERY_POINT),)
            steps[i] = replace(step, crash=Crash(points, batch=0))
    runs = [i for i, step in enumerate(steps) if isinstance(step, Scheduled | Backfill)]
    edits: list[tuple[int, Edit]] = []  # (the index of the step it follows, the edit)
    if rng.random() < 0.4:
        added = rng.choice(runs[:-1] or runs)
        edits.append((added, Edit(EDITS[0])))
        later = [i for i in runs if i > added]
        if later and rng.random() < 0.6:
            edits.append((rng.choice(later), Edit(EDITS[1])))
    readmits = [i for i, step in enumerate(steps) if isinstance(step, Readmit)]
    if readmits and rng.random() < 0.4:
        edits.append((readmits[0] - 1, Edit(EDITS[2])))
    for after, edit in sorted(edits, key=lambda e: e[0], reverse=True):
        steps.insert(after + 1, edit)


def _random_crash(rng: random.Random) -> Crash:
    """Half the time one table's write fails while the others commit (the likeliest partial commit)."""
    roll = rng.random()
    if roll < 0.2:
        points: tuple[str, ...] = (rng.choice(("after_delta", "after_postgres")),)
    elif roll < 0.7:
        points = (rng.choice(FAULT_WRITES),)
    else:
        points = tuple(p for p in FAULT_WRITES if rng.random() < 0.5) or (rng.choice(FAULT_WRITES),)
    return Crash(points, batch=rng.choice((0, 0, 1)))


def choose_ranges(
    seed: int, step: int, ends: dict[int, int], lows: dict[int, int] | None = None
) -> dict[int, tuple[int, int]]:
    """A backfill's ranges over some partitions: processed, unprocessed or overlapping offsets,
    some starting below what retention kept (``lows``); none wholly below it."""
    rng = random.Random(seed * 1_000 + step)
    lows = lows or {}
    chosen = [p for p, end in sorted(ends.items()) if end > 0 and rng.random() < 0.7]
    chosen = chosen or [p for p, end in sorted(ends.items()) if end > 0][:1]
    ranges = {}
    for p in chosen:
        start = rng.randint(0, ends[p] - 1)
        end = rng.randint(start + 1, ends[p])
        if end > lows.get(p, 0):
            ranges[p] = (start, end)
    return ranges


def retention_cuts(seed: int, step: int, lows: dict[int, int], ends: dict[int, int]) -> dict[int, int]:
    """Where retention cuts each partition it reaches: the first offset it keeps."""
    rng = random.Random(seed * 1_000 + step)
    return {p: rng.randint(lows[p] + 1, end) for p, end in sorted(ends.items()) if end > lows[p] and rng.random() < 0.7}
