"""The real pipeline against the reference model, in random scenarios with crashes anywhere.

Each seed generates a scenario (``model.generate``) and drives real Kafka, Spark/Delta and
PostgreSQL through it: several partitions of a CreateTime topic whose timestamps go back,
duplicates (some carrying another entity), malformed records, scheduled runs in small batches,
backfills over processed, unprocessed and overlapping ranges of some partitions, under session
rules with sub-second parts. And the faults:

* crashes after any subset of the table commits, each followed by its retry; some after PostgreSQL
  was restored to a dump taken before the run (then reconcile and repair must put the sinks back
  together), some after a maintenance (compaction, VACUUM);
* retention removing records below a point between runs, and while a run reads: the runs refuse
  until the loss is acknowledged, and every record is then either in the sinks or recorded lost;
* a failover while a backfill is inside its Delta writes and another waits for the lock: the
  second takes over, the first wakes up and must add nothing;
* damage to a sink (an event deleted or changed, a session deleted) that reconcile must find and
  repair must fix, sometimes undone before the repair (a stale finding the repair must leave);
* a producer release the contract does not know: its records are quarantined until the contract is
  fixed; then new ones are accepted as they arrive, damage found before the readmit is repaired
  (the repair readmits first the quarantined records of the range it clears), and a readmit
  (crashing at a write first, sometimes) brings the others back as if accepted at arrival, and
  reconcile agrees;
* the topic deleted and created again: every run and reconcile must refuse;
* pipelines a user names against the platform (``events`` beside one or two others named like the
  PostgreSQL login role, compose's role, with 40 characters, ``events_v2``): before the steps, an entry
  colliding with each (its name after case or Unicode folding, with white space or a newline, a
  reserved name, its name again, its topic) must be refused by the check, and a run of the pipeline
  refused before any work where the entry would share its schema, folder, lock or topic;
* the first pipeline beside ``events`` reads Avro through the schema registry (``model_avro``): its records
  in Confluent's wire format, each malformed one of a way Avro cannot be read, its release's records of a
  writer schema the reader cannot resolve until the fix registers it as the subject's next version;
* runs selected as users select them: the settings, ``TIDEMARK_PIPELINE`` (with ``TIDEMARK_TOPIC`` still
  the default pipeline's), or ``--pipeline``/``--topic``, whose other pipelines' topics are refused;
* edits of the pipelines file between steps: a typed column added (the next run adds it), its type
  changed once the table holds it (the next run refused in one line, before any write, then undone),
  the session rules changed before a readmit (refused before its first write, then undone);
* crashes in repairs (then repaired again) and at any point of a readmit's batch.

After every step it checks that every processed record is in the table the model says, once, that
Delta sessions, PostgreSQL sessions and the model's sessions are the same rows, and that every
record retention took before a run read it is recorded as lost.

``make test-scenarios`` runs the seeds in :data:`FIXED_SEEDS`, ``make fuzz-found`` those in :data:`FOUND_SEEDS`;
``make fuzz SEEDS=N [FROM=F]`` runs N more from
seed F (``TIDEMARK_FUZZ_SEEDS``, ``TIDEMARK_FUZZ_FROM``, default 1000), ``make fuzz SEED=S`` replays
one (``TIDEMARK_FUZZ_SEED``). A seed's runs continue stored sessions from their rows, or read every touched
entity's events again (``TIDEMARK_CONTINUE_SESSIONS``), as the seed draws; ``TIDEMARK_FUZZ_CONTINUE=on|off``
forces one for every seed.
"""

from __future__ import annotations

import copy
import os
import random
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest
import yaml

from spark_jobs import ingest, maintenance, readmit, reconcile, repair
from spark_jobs.db import transaction
from spark_jobs.errors import ConfigError, ContractChanged, DataLossError, SessionRulesChanged, TopicRecreated
from spark_jobs.offsets import ensure_topic, watermarks
from spark_jobs.pipelines_check import PipelinesError
from spark_jobs.planning import plan_backfill
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta, postgres
from spark_jobs.store import open_findings, quarantine
from tests.integration.spark_jobs.checks import (
    delete_records,
    delta_rows,
    dump_postgres,
    fail_over,
    query,
    recreate_topic,
    restore_postgres,
    until,
    waiting_for_the_lock,
)
from tests.integration.spark_jobs.model import (
    CONTRACT_TYPES,
    EDITS,
    RELEASE_TYPE,
    Backfill,
    Crash,
    Edit,
    Fix,
    Produce,
    Readmit,
    Record,
    Recreate,
    Retention,
    Scenario,
    Scheduled,
    Tamper,
    choose_ranges,
    expected,
    generate,
    retention_cuts,
)
from tests.integration.spark_jobs.model_avro import AvroTopic
from tests.integration.spark_jobs.model_avro import contract as avro_contract
from tidemark.migrations import migrate_pipelines

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructField

    from spark_jobs.contract import SessionRules

# The second pipeline's scenario is drawn from seed + SECOND, the third's from seed + 2 * SECOND.
SECOND = 1_000_003
SHIPPED_PIPELINES = Path(__file__).resolve().parents[3] / "pipelines.yaml"

# 39849: every fault in one scenario (about 3 minutes): two partitions, a restore, maintenance,
# retention before and during runs, a takeover, a stale repair, the repair of a changed event after
# the contract's fix, a readmit through a crash, a re-created topic, a 10 min 7.25 s gap.
# 8805: a retried batch that read nothing from Kafka (retention took its records while the run
# read them) and held what its crashed attempt wrote.
FIXED_SEEDS = (39849, 8805)
# Seeds that found a fault an example test of `make test` now covers on real services, replayed by
# `make fuzz-found` (about 5 minutes) rather than by every CI run:
# 8812: a repair, after the contract's fix and before the readmit, of a range that holds quarantined
# records the fix accepts (test_readmit.py).
# 8827: a batch crashed before its quarantine write, and retention removed its invalid records
# before the retry, which quarantines none of them, so no reason may count them (test_retention.py).
# 60003: a repair crashed after its readmit-first batch, which marked the damaged range moved; the
# repair run again judged the range by count and offsets and left the damage (test_readmit.py).
FOUND_SEEDS = (8812, 8827, 60003)


def _seeds() -> list[int]:
    if os.environ.get("TIDEMARK_FUZZ_FOUND"):
        return list(FOUND_SEEDS)
    if os.environ.get("TIDEMARK_FUZZ_SEED"):
        return [int(os.environ["TIDEMARK_FUZZ_SEED"])]
    if os.environ.get("TIDEMARK_FUZZ_SEEDS"):
        first = int(os.environ.get("TIDEMARK_FUZZ_FROM") or 1000)
        return list(range(first, first + int(os.environ["TIDEMARK_FUZZ_SEEDS"])))
    return list(FIXED_SEEDS)


@dataclass
class Trial:
    """One pipeline's run of a seed: the real services' settings, and what the model knows so far."""

    spark: SparkSession
    settings: Settings
    scenario: Scenario
    home: Path
    done: list[str]  # what every pipeline did so far, in order (shared)
    seed: int  # the test's (every pipeline's): what `make fuzz SEED=` replays
    base: Settings  # the settings every pipeline's are made from (TIDEMARK_PIPELINE events, its topic)
    neighbours: list[str] = field(default_factory=list)  # the other pipelines' topics
    records: list[Record] = field(default_factory=list)
    processed: set[tuple[int, int]] = field(default_factory=set)  # (partition, offset) the sinks must hold
    deleted: set[tuple[int, int]] = field(default_factory=set)  # what retention removed from Kafka
    lost: set[tuple[int, int]] = field(default_factory=set)  # removed before any run read them: recorded losses
    fixed: bool = False  # the contract accepts the release's records
    admitted: set[tuple[int, int]] = field(default_factory=set)  # the release's records the contract accepted
    restored: bool = False  # PostgreSQL was restored to an earlier dump (its quarantine counts with it)
    read: dict = field(default_factory=dict)  # (table, columns) -> (the table's newest commit, its rows at it)
    column: str | None = None  # the type of the typed column ``n`` an Edit declared
    avro: AvroTopic | None = None  # an Avro pipeline's schemas in the registry (None: a JSON pipeline)

    def note(self, text: str) -> None:
        self.done.append(f"[{self.settings.pipeline}] {text}")

    def steps(self) -> str:
        return "\n".join(f"  {i}. {text}" for i, text in enumerate(self.done))

    def fail(self, problem: str) -> None:
        pytest.fail(
            f"seed {self.seed}, pipeline {self.settings.pipeline} ({self.scenario.partitions} partition(s), "
            f"rules {self.scenario.rules}, sessions continued: {self.settings.continue_sessions}) after step "
            f"{len(self.done) - 1}: {problem}\nsteps:\n{self.steps()}\n"
            f"replay: make fuzz SEED={self.seed}",
            pytrace=False,
        )


@pytest.mark.scenario
@pytest.mark.timeout(2_700)  # three pipelines' scenarios with every fault: up to about 15 minutes here
@pytest.mark.parametrize("seed", _seeds())
def test_pipelines_match_the_model_after_every_run(spark, database, registry, seed) -> None:
    """The pipeline ``events`` (PostgreSQL's ``public``, the lake root's top level) and one or two others
    under names a user could choose against it (the login role's, the compose role's, one of 40 characters,
    ``events_v2``), the first of them reading Avro through the schema registry (the others JSON), each with
    its own topic, records, session rules and faults, their steps interleaved;
    after each step every pipeline must match the model: one pipeline's crash, restore, retention, damage,
    repair, edit or re-created topic leaves the others as they were. Before the steps, entries colliding
    with each name (after case and Unicode folding, a trailing newline, the same topic) are refused."""
    home = database.home / "runs" / f"model-{seed}-{uuid.uuid4().hex[:6]}"
    home.mkdir(parents=True)
    role = query(database, "SELECT current_user")[0][0]
    scenarios = {
        name: generate(seed + i * SECOND, prefix=f"s{seed}{'bc'[i - 1] if i else ''}-")
        for i, name in enumerate(_names(seed, role))
    }
    topics = {name: f"model-{seed}-{name[:12]}-{uuid.uuid4().hex[:6]}" for name in scenarios}
    config = yaml.safe_load(SHIPPED_PIPELINES.read_text())
    events_entry = config["pipelines"][0]
    events_entry["contract"]["schema"]["properties"]["event_type"]["enum"] = CONTRACT_TYPES  # until a Fix step
    # Each entry a copy of its own: a shared contract would be one YAML anchor, and a Fix of one would fix both.
    config["pipelines"] = [
        {**copy.deepcopy(events_entry), "name": name, "topic": topics[name], "sessions": _declared(scenario.rules)}
        for name, scenario in scenarios.items()
    ]
    avro = config["pipelines"][1]  # the first pipeline beside events reads Avro
    avro["contract"] = avro_contract()
    schemas = AvroTopic.registered(database.schema_registry(), avro["topic"])
    (home / "pipelines.yaml").write_text(yaml.safe_dump(config))
    lake = replace(
        database,
        lake_root=str(home / "lake"),
        checkpoint_root=str(home / "checkpoints"),
        pipelines_file=home / "pipelines.yaml",
        continue_sessions=_continuing(seed),
    )
    migrate_pipelines(lake)
    done: list[str] = []
    trials = []
    for pipeline in lake.pipelines():
        scenario = scenarios[pipeline.name]
        settings = lake.for_run(pipeline.name)
        assert settings.session_rules == scenario.rules, f"{pipeline.name}: the file's rules are the scenario's"
        ensure_topic(settings, settings.topic, partitions=scenario.partitions, timestamp_type="CreateTime")
        trial = Trial(spark, settings, scenario, home, done, seed, lake)
        if pipeline.name == avro["name"]:
            trial.avro = schemas
        trials.append(trial)
    for trial in trials:
        trial.neighbours = [other.settings.topic for other in trials if other is not trial]
        _colliding_entries_are_refused(trial)
    for trial, index, step in _interleaved(seed, trials):
        try:
            if _step(trial, index, step):
                for other in trials:
                    if other is not trial:
                        _check(other)
        except Exception as exc:  # an error the pipeline raised: with the steps that led to it
            trial.fail(f"{type(exc).__name__}: {exc}")
    if os.environ.get("TIDEMARK_FUZZ_VERBOSE"):  # what a passing seed did (make fuzz ... FUZZ_ARGS=-s)
        print(f"\nseed {seed}:\n{trials[0].steps()}")


def _continuing(seed: int) -> bool:
    """Whether the seed's runs continue stored sessions from their rows (``TIDEMARK_CONTINUE_SESSIONS``, the
    default) or read every touched entity's events again: drawn from the seed (on for two seeds in three),
    or forced by ``TIDEMARK_FUZZ_CONTINUE=on|off``."""
    forced = os.environ.get("TIDEMARK_FUZZ_CONTINUE", "")
    if forced:
        if forced not in ("on", "off"):
            raise ValueError(f"TIDEMARK_FUZZ_CONTINUE={forced!r}: on or off")
        return forced == "on"
    return random.Random(seed * 7_919 + 11).random() < 2 / 3


def _names(seed: int, role: str) -> list[str]:
    """``events`` and one or two other pipelines' names, drawn from names a user could choose that meet
    the default pipeline, the login role or a limit: the PostgreSQL role's (``search_path``'s ``"$user"``),
    compose's role, the longest a name may be, ``events`` with a suffix."""
    rng = random.Random(seed * 6_700_417 + 7)
    pool = ["second", role, "tidemark_pipeline", "events_v2", "p" + "0123456789" * 3 + "_40_chars"]
    return ["events", *rng.sample(pool, rng.choice((1, 1, 2)))]


def _declared(rules) -> dict:
    """Session rules as a pipelines file declares them."""
    return {"gap_minutes": rules.gap.total_seconds() / 60, "max_hours": rules.max_length.total_seconds() / 3600}


def _interleaved(seed: int, trials: list[Trial]) -> Iterator[tuple[Trial, int, object]]:
    """Each trial's steps in its order, the trials' taken in a random order (drawn from the seed)."""
    rng = random.Random(seed * 15_485_863 + 3)
    pending = [list(enumerate(t.scenario.steps)) for t in trials]
    while any(pending):
        which = rng.choice([i for i, steps in enumerate(pending) if steps])
        index, step = pending[which].pop(0)
        yield trials[which], index, step


def _step(trial: Trial, index: int, step) -> bool:
    """Do step ``index`` of the scenario, and check the sinks against the model after any that writes
    (returns whether it wrote)."""
    if isinstance(step, Produce):
        trial.records += _produce(trial, step.records)
        trial.note(str(step))
        return False
    if isinstance(step, Retention):
        _retention(trial, index)
        return False
    if isinstance(step, Fix):
        _fix(trial)
        return False
    if isinstance(step, Edit):
        _edit(trial, step)
        return False
    if isinstance(step, Tamper):
        _tamper(trial, index, step)
    elif isinstance(step, Readmit):
        _readmit(trial, index, step)
    elif isinstance(step, Recreate):
        _recreate(trial)
    else:
        _run(trial, index, step)
    _check(trial)
    return True


def _run(trial: Trial, index: int, step: Scheduled | Backfill) -> None:
    """A scheduled run or a backfill, crashing (or taken over) first if the step says so, then done.
    A run refused for offsets retention removed is run again acknowledging the loss."""
    spark, settings = trial.spark, _selected(trial, step.select)
    held = watermarks(settings, settings.topic)
    ends = {p: high for p, (_, high) in held.items()}
    if isinstance(step, Backfill):
        lows = {p: low for p, (low, _) in held.items()}
        step = replace(step, offsets=choose_ranges(trial.scenario.seed, index, ends, lows))
        if not step.offsets:
            trial.note(f"{step}: every range drawn is gone")
            return
        try:
            plan = plan_backfill(settings, settings.topic, offsets=step.offsets)
        except DataLossError:
            _refused_for(trial, "backfill")
            plan = plan_backfill(settings, settings.topic, offsets=step.offsets, allow_data_loss=True)
        run: Callable[..., object] = lambda fault, plan=plan: ingest.run_backfill(spark, settings, plan, fault=fault)  # noqa: E731
        covered = {(p, o) for p, (start, end) in step.offsets.items() for o in range(start, end)}
    else:

        def run(fault, step=step) -> None:
            def attempt(acknowledged: bool) -> None:
                ingest.run_scheduled(
                    spark, settings, max_offsets_per_trigger=step.max_offsets_per_trigger,
                    allow_data_loss=acknowledged, fault=fault,
                )  # fmt: skip

            try:
                attempt(False)
            except DataLossError:
                _refused_for(trial, "scheduled run")
                attempt(True)

        if step.erode:
            run = _eroding(trial, run)
        covered = {(p, o) for p, end in ends.items() for o in range(end)}
    trial.note(str(step))
    before = set(trial.processed)
    dump = trial.home / f"before-step-{index}.sql"
    crash = step.crash
    if crash is not None and crash.takeover:
        _taken_over(trial, plan, crash)
    elif crash is not None:
        if crash.restore:
            dump_postgres(settings, dump)
        try:
            run(crash.hook())
            trial.note(f"(the run wrote fewer than {crash.batch + 1} batches: it did not crash)")
        except Exception as exc:  # the injected crash (Spark's streaming query wrapper is its cause)
            if "injected crash" not in str(exc):
                raise
        if crash.restore:
            restore_postgres(settings, dump)
            trial.restored = True
        if crash.maintain:
            maintenance.maintain(spark, settings)
    run(None)
    # What retention removed before a run read it is lost, and must be recorded as such; the rest
    # is in the sinks. (Retention during a run races Spark's consumer: what it fetched first is read.)
    recorded = _recorded_losses(settings)
    gone = {c for c in covered - before if c in trial.deleted and c in recorded}
    trial.lost |= gone
    trial.processed |= covered - gone - trial.lost
    if trial.fixed:  # the release's records this step read first were checked with the fixed contract
        trial.admitted |= {r.coordinates for r in trial.records if r.pending} & (trial.processed - before)
    if crash is not None and crash.restore:
        _reconcile_and_repair(trial, index)


def _selected(trial: Trial, select: str):
    """The settings a run of the trial's pipeline gets when selected as ``select`` says (model.SELECTIONS):
    the same as the trial's, whatever ``TIDEMARK_TOPIC`` says; ``--topic`` naming another pipeline's topic
    is refused first."""
    name, base = trial.settings.pipeline, trial.base
    if select == "variable":  # TIDEMARK_TOPIC still events' topic, as the default pipeline's deployment has it
        chosen = Settings.from_env(base.to_env() | {"TIDEMARK_PIPELINE": name}).for_run()
    elif select == "flag":
        for other in trial.neighbours:
            try:
                base.for_run(name, topic=other)
            except ConfigError as refused:
                if f"--topic {other!r}: pipeline {name!r} reads {trial.settings.topic!r}" not in str(refused):
                    trial.fail(f"--topic {other!r} was refused with another line: {refused}")
            else:
                trial.fail(f"a run of {name!r} with --topic {other!r} (another pipeline's topic) was not refused")
        chosen = base.for_run(name, topic=trial.settings.topic)
    else:
        return trial.settings
    if chosen != trial.settings:
        trial.fail(f"selected by {select}, the run's settings differ: {chosen} != {trial.settings}")
    return chosen


def _colliding_entries_are_refused(trial: Trial) -> None:
    """Entries a user could add beside the trial's pipeline: names it becomes after case or Unicode folding
    or with white space, a reserved name, its own name again, its own topic. Each is refused by the check;
    one that would share the pipeline's schema, folder, lock or topic stops the pipeline's runs too, before
    any work; the others leave it as it was. The file is then put back."""
    name, topic, path = trial.settings.pipeline, trial.settings.topic, trial.base.pipelines_file
    original = path.read_text()
    entry = next(p for p in yaml.safe_load(original)["pipelines"] if p["name"] == name)
    fullwidth = "".join(chr(ord(c) + 0xFEE0) if c.isalnum() else "\uff3f" for c in name)
    fresh = f"{topic}-other"
    stops = {"its name again": (name, fresh), "its topic": ("twin", topic)}
    if "_" in topic or "." in topic:  # Kafka treats '.' and '_' in a topic name as one
        stops["its topic with '.' for '_'"] = ("twin", topic.translate(str.maketrans("._", "_.")))
    leaves = {
        "upper case": name.upper(), "a trailing newline": f"{name}\n", "a leading space": f" {name}",
        "full-width letters": fullwidth, "a zero-width space": f"{name}\u200b", "public": "public",
        "pg_": f"pg_{name}"[:40], "a lake root table": "quarantine",
    }  # fmt: skip
    cases = [(what, n, t, True) for what, (n, t) in stops.items()] + [(w, n, fresh, False) for w, n in leaves.items()]
    try:
        for what, other_name, other_topic, stopped in cases:
            config = yaml.safe_load(original)
            config["pipelines"].append({**copy.deepcopy(entry), "name": other_name, "topic": other_topic})
            path.write_text(yaml.safe_dump(config))
            try:
                trial.base.pipelines()
                trial.fail(f"an entry with {what} ({other_name!r}, topic {other_topic!r}) passed the check")
            except PipelinesError:
                pass
            try:
                runs = trial.base.for_run(name) == trial.settings
            except ConfigError:
                runs = False
            if runs == stopped:
                trial.fail(f"beside an entry with {what} ({other_name!r}), a run of {name!r} was "
                           f"{'not refused' if stopped else 'refused'}")  # fmt: skip
            if other_name != name and other_name in {p.name for p in trial.base.declarations().pipelines}:
                trial.fail(f"the entry with {what} ({other_name!r}) is declared beside {name!r}")
    finally:
        path.write_text(original)
    trial.note(f"entries colliding with {name!r} are refused ({', '.join(what for what, *_ in cases)})")


def _refused_for(trial: Trial, what: str) -> None:
    """A run refused for lost offsets: only after retention removed some."""
    if not trial.deleted:
        trial.fail(f"the {what} was refused for lost offsets, but retention removed nothing")
    trial.note(f"(the {what} is refused for offsets retention removed; run again acknowledging the loss)")


def _eroding(trial: Trial, run):
    """``run`` with retention striking while it runs: after its first batch committed, the
    records of a partition up to a few offsets past what it read are removed."""
    settings = trial.settings
    rng = random.Random(trial.scenario.seed * 31 + len(trial.done))

    def eroding_run(fault) -> None:
        struck: list[bool] = []

        def strike(point: str) -> None:
            if fault is not None:
                fault(point)
            if point != "after_postgres" or struck:
                return
            struck.append(True)
            read_to = dict(
                query(
                    settings,
                    "SELECT kafka_partition, max(end_offset) FROM ledger_ranges WHERE topic = %s GROUP BY 1",
                    settings.topic,
                )
            )
            for p, (low, high) in sorted(watermarks(settings, settings.topic).items()):
                cut = min(high, read_to.get(p, 0) + rng.randint(1, 6))
                if cut > low and rng.random() < 0.7:
                    delete_records(settings, p, cut)
                    trial.deleted |= {(p, o) for o in range(cut)}
                    trial.note(f"(after its first batch, retention removes partition {p} below {cut})")

        run(strike)

    return eroding_run


def _taken_over(trial: Trial, plan, crash: Crash) -> None:
    """The backfill stops inside its first Delta write; a second one waits for the lock;
    a failover ends every backend of the first; the second commits; the first wakes and must fail."""
    spark, settings = trial.spark, trial.settings
    asleep, wake = threading.Event(), threading.Event()
    outcomes: dict[str, object] = {}

    def sleep_inside_the_write(point: str) -> None:
        if point.startswith("write:") and not asleep.is_set():
            asleep.set()
            wake.wait(600)

    def backfill(name: str, **kwargs) -> threading.Thread:
        def work() -> None:
            try:
                outcomes[name] = ingest.run_backfill(spark, settings, plan, **kwargs)
            except BaseException as exc:  # judged below
                outcomes[name] = exc

        thread = threading.Thread(target=work)
        thread.start()
        return thread

    old = backfill("old", fault=sleep_inside_the_write)
    until(lambda: asleep.is_set() or not old.is_alive(), "the backfill sleeps inside its write")
    if not asleep.is_set():
        trial.note("(the backfill wrote nothing to Delta: nothing to take over)")
        return
    new = backfill("new", wait=True)
    until(lambda: waiting_for_the_lock(settings), "the second backfill waits for the lock")
    fail_over(settings)
    new.join(timeout=600)
    if isinstance(outcomes.get("new"), BaseException):
        trial.fail(f"the run that took over failed: {outcomes['new']!r}")
    wake.set()
    old.join(timeout=600)
    if not isinstance(outcomes.get("old"), BaseException):
        trial.fail("the backfill that lost its lease committed after it was taken over")


def _retention(trial: Trial, index: int) -> None:
    settings = trial.settings
    held = watermarks(settings, settings.topic)
    cuts = retention_cuts(
        trial.scenario.seed, index, {p: lo for p, (lo, _) in held.items()}, {p: hi for p, (_, hi) in held.items()}
    )
    for p, cut in cuts.items():
        delete_records(settings, p, cut)
        trial.deleted |= {(p, o) for o in range(cut)}
    trial.note(f"retention removes the records below {cuts or 'nothing'} (partition: first kept offset)")


def _tamper(trial: Trial, index: int, step: Tamper) -> None:
    """Damage a sink whose ranges were checked (as the reconcile after every ingest does: a value
    changed before its range's first check becomes the baseline); reconcile (every verified range
    due) must find it; undo it when the step says so (a stale finding); repair that run; its
    re-check must pass."""
    spark, settings = trial.spark, trial.settings
    rng = random.Random(trial.scenario.seed * 1_000 + index)
    trial.note(str(step))
    checked = reconcile.run(settings, f"before-tamper-{index}", lambda: spark)
    if not checked.consistent:
        trial.fail(f"reconcile found something before the damage: {checked.headline()}")
    if step.what == "delete a session":
        sessions = query(settings, "SELECT session_id FROM sessions ORDER BY session_id")
        if not sessions:
            trial.note("(no session to delete)")
            return
        (session,) = rng.choice(sessions)
        with transaction(settings.pipeline_dsn) as cur:
            cur.execute("DELETE FROM sessions WHERE session_id = %s RETURNING *", (session,))
            row, columns = cast(tuple, cur.fetchone()), [d.name for d in cast(tuple, cur.description)]

        def undo() -> None:
            with transaction(settings.pipeline_dsn) as cur:
                cur.execute(f"INSERT INTO sessions ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(row))})", row)

    else:
        from delta.tables import DeltaTable

        if not DeltaTable.isDeltaTable(spark, settings.table_path("events")):
            trial.note("(no lake yet: no event to damage)")
            return
        events = delta.table(spark, settings.table_path("events"))
        # Only where Kafka still holds the record: a repair cannot put back what retention removed
        # (it keeps such rows and says so: test_retention covers that).
        lows = {p: low for p, (low, _) in watermarks(settings, settings.topic).items()}
        rows = [
            (p, o)
            for p, o in events.toDF().select("partition", "offset").orderBy("partition", "offset").collect()
            if o >= lows[p]
        ]
        if not rows:
            trial.note("(no event to damage)")
            return
        waiting = {
            (p, o) for p, o in {r.coordinates for r in trial.records if r.pending} & trial.processed - trial.admitted
            if o >= lows[p]
        }  # fmt: skip
        if trial.fixed and waiting:  # an event beside a quarantined record the fix accepts: likely one range
            rows = _nearest(rows, waiting)
        partition, offset = rng.choice(rows)
        version = events.history(1).first()["version"]
        where = f"partition = {partition} AND offset = {offset}"
        if step.what == "delete an event":
            events.delete(where)
        else:
            events.update(where, {"event_type": "'tampered'"})

        def undo() -> None:
            events.restoreToVersion(version)

    everything_due = replace(settings, reverify_days=1e-9)
    report = reconcile.run(everything_due, f"tampered-{index}", lambda: spark)
    if report.consistent:
        trial.fail(f"reconcile did not find the damage ({step.what}): {report.headline()}")
    if step.undo:
        undo()
    repairs = []  # the repairs that ran to their end: a crash that did not strike leaves the work to the first
    if step.crash is not None:
        try:
            repairs.append(repair.repair(spark, settings, report.run_id, fault=step.crash.hook()))
            trial.note("(the repair wrote fewer batches than the crash needs: it did not crash)")
        except Exception as exc:
            if "injected crash" not in str(exc):
                raise
    fixed = repair.repair(spark, settings, report.run_id)
    repairs.append(fixed)
    trial.note(f"reconcile: {report.headline()}; repaired: {fixed.recheck.headline()}")
    if not fixed.recheck.consistent:
        trial.fail(f"the repair left findings:\n{fixed.describe()}")
    if trial.fixed:  # each repair readmitted first the release's quarantined records in what it cleared
        lows = {p: low for p, (low, _) in watermarks(settings, settings.topic).items()}
        cleared = {
            (r.partition, o) for done in repairs for r in done.plan.clear
            for o in range(max(r.start, lows[r.partition]), r.end)
        }  # fmt: skip
        trial.admitted |= {r.coordinates for r in trial.records if r.pending} & trial.processed & cleared


def _nearest(rows: list[tuple[int, int]], targets: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (partition, offset) ``rows`` nearest to one of ``targets`` in their partition."""
    distance = {
        (p, o): min((abs(o - t) for tp, t in targets if tp == p), default=float("inf")) for p, o in rows
    }  # fmt: skip
    least = min(distance.values())
    return [row for row in rows if distance[row] == least]


def _recreate(trial: Trial) -> None:
    """Delete the topic, create it again, send new records: every run and reconcile must refuse."""
    spark, settings = trial.spark, trial.settings
    trial.note("the topic is deleted and created again; 3 new records arrive")
    recreate_topic(settings, trial.scenario.partitions, timestamp_type="CreateTime")
    _produce(trial, [replace(r, partition=0, event_id=f"new-{i}") for i, r in enumerate(trial.records[:3])])
    refusals = {
        "a scheduled run": lambda: ingest.run_scheduled(spark, settings),
        "a backfill": lambda: ingest.run_backfill(
            spark, settings, plan_backfill(settings, settings.topic, offsets={0: (0, 1)})
        ),
        "reconcile": lambda: reconcile.run(settings, "after-recreate", lambda: spark),
    }  # fmt: skip
    for what, work in refusals.items():
        try:
            work()
        except TopicRecreated:
            continue
        trial.fail(f"{what} on the re-created topic was not refused")


def _fix(trial: Trial) -> None:
    """Add the release's event type to the trial's contract in the pipelines file (a compatible change); for
    an Avro pipeline, register the release's schema as its subject's next version."""
    if trial.avro is not None:
        trial.fixed = True
        version = trial.avro.registry.latest(f"{trial.settings.topic}-value").version
        trial.avro.fix()
        trial.note(f"the contract is fixed: the release's schema (event_type {RELEASE_TYPE!r}) is registered "
                   f"after version {version} of the subject")  # fmt: skip
        return
    path = trial.settings.pipelines_file
    config = yaml.safe_load(path.read_text())
    entry = next(p for p in config["pipelines"] if p["name"] == trial.settings.pipeline)
    entry["contract"]["schema"]["properties"]["event_type"]["enum"] = [*CONTRACT_TYPES, RELEASE_TYPE]
    path.write_text(yaml.safe_dump(config))
    trial.fixed = True
    trial.note(f"the contract is fixed: event_type {RELEASE_TYPE!r} is accepted from now on")


def _entry_edited(trial: Trial, change) -> str:
    """Apply ``change`` to the trial's entry of the pipelines file; returns the file as it was."""
    path = trial.base.pipelines_file
    before = path.read_text()
    config = yaml.safe_load(before)
    change(next(p for p in config["pipelines"] if p["name"] == trial.settings.pipeline))
    path.write_text(yaml.safe_dump(config))
    return before


def _declare_column(type_: str):
    def change(entry: dict) -> None:
        if entry["contract"].get("format") != "avro":  # an Avro contract's fields are its reader schema's
            entry["contract"]["schema"]["properties"]["n"] = {"type": "integer"}
        entry["contract"]["columns"] = {"n": type_}

    return change


def _edit(trial: Trial, step: Edit) -> None:
    """An edit of the pipelines file (model.Edit): a compatible one stays; one the stored data cannot take is
    refused by the next run before any write, with one line that says what to do, and then undone."""
    spark, settings = trial.spark, trial.settings
    trial.note(str(step))
    if step.what == EDITS[0]:
        _entry_edited(trial, _declare_column("int"))
        trial.column = "int"
        return
    if step.what == EDITS[1]:
        events = Path(settings.table_path("events"))
        schema: Iterable[StructField] = (
            spark.read.format("delta").load(str(events)).schema if _newest_commit(events) else []
        )
        held = {f.name: f.dataType.simpleString() for f in schema}
        if trial.column is None or not held or held.get("n") != "int":
            trial.note("(the events table does not hold the column n as int yet: nothing a run could refuse)")
            return
        before = _entry_edited(trial, _declare_column("bigint"))
        # As the table holds it, or as the contract a batch recorded says (whichever the run compares first).
        line = (
            r"columns\.n: events holds the column n as int, the contract declares bigint"
            r"|'/n' changed from int to bigint"
        )

        def run() -> None:
            try:
                ingest.run_scheduled(spark, settings)
            except DataLossError:  # retention removed records since the last run: refused for that first
                _refused_for(trial, "scheduled run")
                ingest.run_scheduled(spark, settings, allow_data_loss=True)

        _refused_before_any_write(trial, run, ContractChanged, line)
    else:
        rules = cast("SessionRules", settings.session_rules)
        before = _entry_edited(trial, lambda e: e["sessions"].update(gap_minutes=rules.gap.total_seconds() / 60 + 5))
        if not query(settings, "SELECT count(*) FROM ledger_batches")[0][0]:
            trial.note("(no batch committed yet: no session rules are recorded to refuse other ones)")
        else:
            edited = trial.base.for_run(settings.pipeline)
            work = lambda: readmit.readmit(spark, edited, readmit.Selection())  # noqa: E731
            line = "the stored sessions were built with .*, this run uses"
            _refused_before_any_write(trial, work, SessionRulesChanged, line)
    trial.base.pipelines_file.write_text(before)
    trial.note("(the edit is undone)")


def _refused_before_any_write(trial: Trial, work, error: type[Exception], line: str) -> None:
    """``work`` must raise ``error`` in one line that says ``line`` (a regular expression), before any Delta
    commit or write attempt."""
    settings = trial.settings
    tables = [Path(settings.table_path(t)) for t in ("events", "duplicates", "quarantine", "sessions")]
    before = [_newest_commit(t) for t in tables], query(settings, "SELECT count(*) FROM write_attempts")
    try:
        work()
    except error as exc:
        refused = str(exc)
    else:
        trial.fail(f"the run after the edit was not refused ({error.__name__})")
    if not re.search(line, refused) or "\n" in refused:
        trial.fail(f"refused with another line than {line!r}: {refused}")
    after = [_newest_commit(t) for t in tables], query(settings, "SELECT count(*) FROM write_attempts")
    if after != before:
        trial.fail(f"the refused run wrote: Delta commits and write attempts {before} -> {after}")
    trial.note(f"(refused before any write: {refused})")


def _readmit(trial: Trial, index: int, step: Readmit) -> None:
    """Readmit every quarantined record the fixed contract accepts (after a crash, again); reconcile agrees."""
    spark, settings = trial.spark, trial.settings
    trial.note(str(step))
    if step.crash is not None:
        try:
            readmit.readmit(spark, settings, readmit.Selection(), fault=step.crash.hook())
            trial.note("(the readmit brought nothing back: it did not crash)")
        except Exception as exc:
            if "injected crash" not in str(exc):
                raise
    readmit.readmit(spark, settings, readmit.Selection())
    trial.admitted |= {r.coordinates for r in trial.records if r.pending} & trial.processed
    report = reconcile.run(settings, f"after-readmit-{index}", lambda: spark)
    if not report.consistent:
        trial.fail(f"reconcile after the readmit finds something:\n{report.summary()}")


def _recorded_losses(settings) -> set[tuple[int, int]]:
    rows = query(
        settings,
        "SELECT kafka_partition, start_offset, end_offset FROM retention_losses WHERE topic = %s",
        settings.topic,
    )
    return {(p, o) for p, start, end in rows for o in range(start, end)}


def _reconcile_and_repair(trial: Trial, index: int) -> None:
    """After a restore the ledger lacks the batches the backup did not hold, and PostgreSQL their
    sessions: reconcile must say so, and its repair must put everything back."""
    spark, settings = trial.spark, trial.settings
    report = reconcile.run(settings, f"after-restore-{index}", lambda: spark)
    if report.consistent:  # the model's records arrived long ago: "lagging" is no finding here
        return
    fixed = repair.repair(spark, settings, report.run_id)
    trial.note(f"reconcile after the restore: {report.headline()}; repaired: {fixed.recheck.headline()}")
    if fixed.recheck.consistent:
        return
    # What no repair can fix stays open for an operator: a range whose offsets retention removed
    # all of (the restore lost the mark of a takeover in it, so it shows as changed; nothing can be
    # read again to rewrite it). The operator acknowledges exactly those; nothing else may be left.
    lows = {p: low for p, (low, _) in watermarks(settings, settings.topic).items()}
    with transaction(settings.pipeline_dsn) as cur:
        still = open_findings.read_open(cur)
    gone = [f.finding_id for f in still if f.kind == "range" and f.finding["end"] <= lows[f.finding["partition"]]]
    if len(gone) < len(still):
        trial.fail(f"the repair after a restore left findings:\n{fixed.describe()}")
    reconcile.acknowledge(settings, gone, "the model", "retention removed every offset of the range")
    after = reconcile.run(settings, f"after-acknowledging-{index}", lambda: spark)
    trial.note(f"acknowledged {len(gone)} finding(s) on ranges retention removed; then: {after.headline()}")
    if not after.consistent:
        trial.fail(f"acknowledged, reconcile still finds something:\n{after.summary()}")


def _produce(trial: Trial, records: list[Record]) -> list[Record]:
    """Send ``records`` to their partitions with their timestamps, as JSON or as the trial's Avro pipeline
    writes them; returns them with their offsets."""
    from confluent_kafka import Producer

    settings = trial.settings
    value = trial.avro.value if trial.avro is not None else Record.value
    producer = Producer({**settings.kafka_client_config(), "enable.idempotence": True})
    offsets: dict[int, int] = {}

    def delivered(i: int):
        def record(err, msg) -> None:
            assert err is None, err
            offsets[i] = msg.offset()

        return record

    for i, r in enumerate(records):
        producer.produce(
            settings.topic, key=r.entity_id.encode(), value=value(r), partition=r.partition,
            timestamp=r.arrival_ms, on_delivery=delivered(i),
        )  # fmt: skip
    assert producer.flush(30) == 0
    return [replace(r, offset=offsets[i]) for i, r in enumerate(records)]


def _quarantine_counted(trial: Trial, reasons: list[str]) -> list[str]:
    """What ``tidemark quarantine`` counts per reason is what ``quarantine`` holds (``reasons``: its
    rows'), once every batch that wrote committed (those that did not are counted when they do) and
    unless PostgreSQL went back to an earlier dump (its counts went with it; the sinks are repaired)."""
    from collections import Counter

    with transaction(trial.settings.pipeline_dsn) as cur:
        cur.execute(
            """SELECT count(*) FROM write_attempts AS a WHERE NOT EXISTS
                   (SELECT FROM ledger_batches AS b WHERE (b.pipeline, b.batch_id) = (a.pipeline, a.batch_id))"""
        )
        if cast(tuple, cur.fetchone())[0] or trial.restored:
            return []
        counted = {t.reason: t.records for t in quarantine.totals(cur)}
    held = dict(Counter(reasons))
    return [] if counted == held else [f"quarantine totals {counted}, but quarantine holds {held}"]


def _newest_commit(table: Path) -> tuple[str, int, int] | None:
    """The newest commit file of a Delta table on the local file system (name, size, modification
    time: a table deleted and created again starts over at version 0), or None if there is none."""
    commits = sorted(table.glob("_delta_log/*.json"))
    if not commits:
        return None
    stat = commits[-1].stat()
    return commits[-1].name, stat.st_size, stat.st_mtime_ns


def _check(trial: Trial) -> None:
    """Every processed record in the table the model says, once; Delta, PostgreSQL and the model's
    sessions the same rows; every record lost to retention recorded as lost."""
    spark, settings = trial.spark, trial.settings
    want = expected(trial.records, trial.processed, trial.scenario.rules, trial.admitted)

    def rows(table: str, *columns: str) -> list[tuple]:
        # A Delta version never changes: while no commit follows the one read last, a read returns the
        # same rows (the model test checks both pipelines after every step, most tables unchanged).
        commit = _newest_commit(Path(settings.table_path(table)))
        if commit is None:  # no lake yet (nothing was written): nothing held
            return []
        last = trial.read.get((table, columns))
        if last is None or last[0] != commit:
            held = [tuple(r) for r in delta_rows(spark, settings, table, *columns)]
            last = trial.read[(table, columns)] = (commit, held)
        return last[1]

    quarantined = rows("quarantine", "partition", "offset", "reason")
    got = {table: rows(table, "partition", "offset") for table in ("events", "duplicates")}
    got["quarantine"] = [(p, o) for p, o, _ in quarantined]
    delta_sessions = [r[0] for r in rows("sessions", delta.SESSION_ROW_TEXT)]
    postgres_sessions = [r[0] for r in query(settings, f"SELECT {postgres.SESSION_ROW_TEXT} FROM sessions")]
    problems = []
    for table, held in got.items():
        if len(held) != len(set(held)):
            problems.append(f"{table} holds a record twice: {sorted(r for r in held if held.count(r) > 1)}")
        want_rows = getattr(want, table)
        if set(held) != want_rows:
            problems.append(
                f"{table}: missing {sorted(want_rows - set(held))}, unexpected {sorted(set(held) - want_rows)}"
            )
    for name, stored in (("Delta", delta_sessions), ("PostgreSQL", postgres_sessions)):
        if sorted(stored) != sorted(want.sessions):
            problems.append(
                f"{name} sessions: missing {sorted(want.sessions - set(stored))}, "
                f"unexpected {sorted(set(stored) - want.sessions)}"
            )
    recorded = _recorded_losses(settings)
    unrecorded = trial.lost - recorded
    if unrecorded:
        problems.append(f"lost to retention but not recorded as lost: {sorted(unrecorded)}")
    problems += _quarantine_counted(trial, [reason for _, _, reason in quarantined])
    if problems:
        problems.append(f"(recorded as lost: {sorted(recorded)}; the model's lost: {sorted(trial.lost)})")
        trial.fail("differs from the model:\n" + "\n".join(problems))
