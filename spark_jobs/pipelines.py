"""Pipelines declared in a file: each Kafka topic with its contract, session rules, schedule and alerts.

``pipelines.yaml`` (the setting ``TIDEMARK_PIPELINES``) lists the pipelines. :func:`load` reads it
and checks it as a whole: first against :data:`CONFIG_SCHEMA` (the file's own shape), then what a
schema cannot say (names and topics used once, each contract a valid JSON Schema, each role a
property the contract declares, as a required string). Every problem is one line that names the
file, the pipeline and the field, and all of them are reported at once.

A pipeline's **contract** is a JSON Schema (draft 2020-12) of the record's value, plus where its
roles live in the value (JSON pointers): the event id, the entity id (the session key), the event
time and, optionally, the event type. ``columns`` name the fields that become typed columns of
``events``; ``properties`` is the part of the value kept as JSON text. The checks every record gets
whatever the contract says (UTF-8, one JSON document, its size, a usable entity id and event time)
are in ``spark_jobs.validation``; see docs/design.md, "Pipelines declared in a file".

Nothing here needs Spark, Kafka or PostgreSQL: the CLI checks the file before it starts anything.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, Field, dataclass, field, make_dataclass, replace
from pathlib import Path
from typing import Any

from spark_jobs.contract import EVENT_COLUMNS, TABLE_SCHEMAS, WORKING_COLUMNS, SessionRules
from spark_jobs.errors import ConfigError
from spark_jobs.pipeline_names import DEFAULT_TOPIC, PipelineNames
from spark_jobs.pipeline_options import (
    ALERTS,
    DAYS,
    DEFAULT_SCHEDULE,
    RECORDS,
    SCHEDULE,
    SESSIONS,
    Alerts,
    option,
    option_problems,
    options,
    read_options,
)

# A pipeline's name names its PostgreSQL schema, its folder of Delta tables and its DAGs (spark_jobs.pipeline_names).
NAME_PATTERN = "^[a-z][a-z0-9_]{0,39}$"
# Names a pipeline may not have: PostgreSQL's schemas (and those starting pg_), `public` (the default
# pipeline `events` keeps its tables there), and the lake root's own folders, where the default
# pipeline keeps its Delta tables (`tidemark land` its raw_events).
RESERVED_NAMES = {
    **dict.fromkeys(("public", "information_schema"), "is a schema PostgreSQL keeps for itself"),
    **dict.fromkeys(("duplicates", "quarantine", "sessions", "raw_events"), "is a Delta table of the lake root"),
}
# Kafka's rule for topic names.
TOPIC_PATTERN = "^[A-Za-z0-9._-]{1,249}$"
# The Spark SQL types a typed column may have.
JSON_TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")
COLUMN_TYPES = ("string", "boolean", "int", "bigint", "long", "double", "date", "timestamp")
DECIMAL_PATTERN = re.compile(r"decimal\((\d{1,2}),\s*(\d{1,2})\)")
# Columns every pipeline's events table has; a typed column may not take one of these names.
RESERVED_COLUMNS = EVENT_COLUMNS
ROLES = ("event_id", "entity_id", "event_time", "event_type")
REQUIRED_ROLES = ROLES[:3]
_POINTER = "^(/([^~]|~[01])*)*$"


@dataclass(frozen=True)
class Column:
    """A typed column of ``events``: ``name`` holds the value at ``pointer`` as ``type``."""

    name: str
    pointer: str
    type: str


@dataclass(frozen=True)
class Contract:
    """What a valid record's value is (``schema``) and where its roles are (JSON pointers)."""

    schema: Mapping[str, Any]
    event_id: str
    entity_id: str
    event_time: str
    event_type: str | None = None
    properties: str | None = None
    key_is_entity_id: bool = True
    columns: tuple[Column, ...] = ()

    @property
    def event_columns(self) -> tuple[str, ...]:
        """The columns of the pipeline's ``events``: every pipeline's, then its typed columns."""
        return (*EVENT_COLUMNS, *(c.name for c in self.columns))

    def table_schema(self, table: str) -> str:
        """The DDL column list of the pipeline's Delta ``table`` (``events`` has the typed columns)."""
        typed = [f"{c.name} {c.type}" for c in self.columns] if table == "events" else []
        return ", ".join([TABLE_SCHEMAS[table], *typed])

    @property
    def digest(self) -> str:
        """A hash of the contract, the same for the same document whatever its key order."""
        text = json.dumps(self.document(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def document(self) -> dict[str, Any]:
        """The contract as the file declares it (with its defaults filled in)."""
        return {
            "schema": self.schema,
            **{role: getattr(self, role) for role in ROLES if getattr(self, role) is not None},
            "properties": self.properties,
            "key_is_entity_id": self.key_is_entity_id,
            "columns": {c.pointer: c.type for c in self.columns},
        }


@dataclass(frozen=True)
class ContractChange:
    """What changed between the contract the stored records were checked with and the file's."""

    compatible: bool
    what: list[str]  # one phrase a change, e.g. "the schema's rules", "entity_id moved from /a to /b"

    def describe(self) -> str:
        return "; ".join(self.what)


def contract_change(stored: Mapping[str, Any], contract: Contract) -> ContractChange:
    """Compare ``contract`` with the ``stored`` document (:meth:`Contract.document`) a pipeline's batches used.

    **Compatible**, applied from the next batch: the schema's rules (a new optional field, a relaxed or a
    tightened rule: records already stored stay where they are, a replay keeps them there), the key
    rule, a new typed column. **Incompatible**, refused before any work: a role (event id, entity id,
    event time, event type, properties) at another pointer, since dedupe, sessions and the stored
    rows are keyed by the old one; a typed column dropped or given another type.
    """
    new = contract.document()
    what: list[str] = []
    compatible = True
    for role in (*ROLES, "properties"):
        if stored.get(role) != new.get(role):
            compatible = False
            what.append(f"{role} moved from {stored.get(role)!r} to {new.get(role)!r}")
    old_columns, new_columns = stored.get("columns", {}), new["columns"]
    for pointer, type_ in old_columns.items():
        if pointer not in new_columns:
            compatible = False
            what.append(f"the typed column of {pointer!r} was dropped")
        elif new_columns[pointer] != type_:
            compatible = False
            what.append(f"the typed column of {pointer!r} changed from {type_} to {new_columns[pointer]}")
    what += [
        f"a typed column of {pointer!r} ({type_})"
        for pointer, type_ in new_columns.items()
        if pointer not in old_columns
    ]
    if stored.get("schema") != new["schema"]:
        what.append("the schema's rules")
    if stored.get("key_is_entity_id") != new["key_is_entity_id"]:
        what.append(f"key_is_entity_id {new['key_is_entity_id']}")
    return ContractChange(compatible, what)


# Today's contract, which the shipped pipelines.yaml declares for the pipeline `events`.
EVENTS_CONTRACT = Contract(
    schema={
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["event_id", "entity_id", "event_type", "event_time"],
        "properties": {
            "event_id": {"type": "string", "minLength": 1},
            "entity_id": {"type": "string", "minLength": 1},
            "event_type": {"type": "string", "minLength": 1},
            "event_time": {"type": "string", "format": "date-time"},
            "properties": {"type": ["object", "null"]},
        },
    },
    event_id="/event_id",
    entity_id="/entity_id",
    event_time="/event_time",
    event_type="/event_type",
    properties="/properties",
    key_is_entity_id=True,
)


@dataclass(frozen=True)
class Pipeline:
    """One pipeline: a topic, its contract and its options (unset values come from the settings)."""

    name: str
    topic: str
    contract: Contract
    # The options: a key of the entry each, and a row of docs/configuration.md's options table (options_table).
    # None: the pipeline cuts no sessions.
    sessions: SessionRules | None = option(
        SESSIONS,
        SessionRules,
        "how the pipeline's sessions are cut: a mapping of `gap_minutes` and `max_hours` (one left out: the "
        "setting's, or the documented default when the setting is `off`), or `off`: no sessions. Recorded with "
        "each batch",
        setting="session_rules",
    )
    dedupe_horizon_days: float = option(
        DAYS,
        30.0,
        "a record is compared with the stored copies of its `event_id` that arrived at most this many days before "
        'its batch (`unbounded`: all of them; docs/design.md, "The dedupe horizon")',
        setting="dedupe_horizon_days",
    )
    # Spark's maxOffsetsPerTrigger, sized so one batch finishes on the embedded machine (2 cores, a 2 GiB
    # driver) well inside the task timeout.
    max_offsets_per_trigger: int = option(
        RECORDS,
        500_000,
        "records per batch of a scheduled run at most (0: no cap)",
        setting="max_offsets_per_trigger",
    )
    # None: manual runs only. Read when the DAG files are parsed; a run's settings keep the deployment's.
    schedule: str | None = option(
        SCHEDULE,
        DEFAULT_SCHEDULE,
        "the ingest DAG's schedule (UTC): a cron expression, a preset (`@hourly`, `@daily`, `@weekly`, "
        "`@monthly`, `@yearly`), or `null`: manual runs only",
        setting="ingest_schedule",
        carried=False,
    )
    alerts: Alerts = option(
        ALERTS,
        Alerts,
        "where the pipeline's alerts go besides the task log: `webhook`, the id of an Airflow connection whose "
        "host is the webhook's URL, and `email`, a list of addresses",
        shown="the deployment's: the `tidemark_alert_webhook` connection and `TIDEMARK_ALERT_EMAIL`",
    )

    @property
    def names(self) -> PipelineNames:
        """Where the pipeline's state lives and what its parts (DAGs, locks, ...) are called."""
        return PipelineNames(self.name)


def _default(declared: Field) -> Any:
    if declared.default_factory is not MISSING:
        return field(default_factory=declared.default_factory)
    return field(default=declared.default)


# What a pipeline that leaves an option out gets (the deployment's settings: Settings.declarations), a field
# per option of Pipeline; and the topic of the default pipeline when its entry names none (TIDEMARK_TOPIC).
Defaults = make_dataclass(
    "Defaults",
    [*((f.name, f.type, _default(f)) for f in options(Pipeline)), ("events_topic", str, field(default=DEFAULT_TOPIC))],
    frozen=True,
    namespace={"__module__": __name__, "__doc__": "What a pipeline that leaves an option out gets: a field per "
               "option of Pipeline, and events_topic, the default pipeline's topic when its entry names none."},
)  # fmt: skip


# The file's own shape. ``x-must`` is the one-line error shown when a value breaks its schema.
CONFIG_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["pipelines"],
    "additionalProperties": False,
    "x-must": "must be a mapping whose one field, pipelines, lists the pipelines",
    "properties": {
        "pipelines": {
            "type": "array",
            "minItems": 1,
            "x-must": "must be a list of at least one pipeline",
            "items": {
                "type": "object",
                "required": ["name", "contract"],
                "additionalProperties": False,
                "x-must": "must be a mapping (name, topic, contract, sessions, ...)",
                "properties": {
                    "name": {
                        "type": "string",
                        "pattern": NAME_PATTERN,
                        "x-must": "must be lower-case letters, digits and _, starting with a letter, at most 40",
                    },
                    "topic": {
                        "type": "string",
                        "pattern": TOPIC_PATTERN,
                        "x-must": "must be a Kafka topic name (letters, digits, '.', '_', '-')",
                    },
                    "contract": {
                        "type": "object",
                        "required": ["schema", "event_id", "entity_id", "event_time"],
                        "additionalProperties": False,
                        "x-must": "must be a mapping with schema, event_id, entity_id and event_time",
                        "properties": {
                            "schema": {
                                "type": ["object", "string"],
                                "x-must": "must be a JSON Schema, or the path of a file holding one",
                            },
                            **{
                                role: {
                                    "type": "string",
                                    "pattern": _POINTER,
                                    "x-must": "must be a JSON pointer into the value, e.g. '/user/id'",
                                }
                                for role in ROLES
                            },
                            "properties": {
                                "type": "string",
                                "pattern": _POINTER,
                                "x-must": "must be a JSON pointer to an object of the value ('' for all of it)",
                            },
                            "key_is_entity_id": {"type": "boolean", "x-must": "must be true or false"},
                            "columns": {
                                "type": "object",
                                "x-must": "must map dotted paths of the value to Spark SQL types",
                                "additionalProperties": {
                                    "type": "string",
                                    "x-must": "must be a Spark SQL type: "
                                    + ", ".join(COLUMN_TYPES)
                                    + " or decimal(p,s)",
                                },
                            },
                        },
                    },
                    **{f.name: f.metadata["kind"].schema for f in options(Pipeline)},
                },
            },
        }
    },
}


class PipelinesError(ConfigError):
    """The file's problems, one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Problem:
    """One line of what is wrong with a pipelines file, and the pipeline it is about (None: no one pipeline)."""

    pipeline: str | None
    line: str


@dataclass(frozen=True)
class Declared:
    """What a pipelines file declares: the pipelines with no problem, and every problem the file has.

    A pipeline with a problem is left out of :attr:`pipelines`, and so is every entry of a name used
    twice: the others stay usable (the DAGs of a healthy pipeline load beside a broken entry).
    """

    pipelines: list[Pipeline]
    problems: list[Problem]
    # The pipelines that read each topic (by :func:`kafka_topic_key`), problems or not: one each, in a good file.
    readers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The topic of each entry whose name and topic could be read, problems or not.
    topics: Mapping[str, str] = field(default_factory=dict)

    def readers_of(self, topic: str) -> tuple[str, ...]:
        """The pipelines whose entries read ``topic``, or a topic Kafka cannot tell from it."""
        return self.readers.get(kafka_topic_key(topic), ())

    def lines(self) -> list[str]:
        return [problem.line for problem in self.problems]

    def problems_of(self, name: str) -> list[str]:
        return [problem.line for problem in self.problems if problem.pipeline == name]

    def broken(self) -> list[str]:
        """The pipelines declared with a problem, in the file's order: each name a pipeline could have (the
        others name no schema, folder or DAG) and no pipeline without a problem has. They stay visible with
        their problems (DAGs, the page, the metrics), and every run of theirs is refused with them."""
        good = {pipeline.name for pipeline in self.pipelines}
        names = (problem.pipeline for problem in self.problems)
        return list(dict.fromkeys(n for n in names if n and n not in good and may_name_a_pipeline(n)))


def load(path: Path, defaults: Defaults | None = None) -> list[Pipeline]:
    """The pipelines ``path`` declares, or a :class:`PipelinesError` with every problem it has."""
    declared = load_each(path, defaults)
    if declared.problems:
        raise PipelinesError(declared.lines())
    return declared.pipelines


def load_each(path: Path, defaults: Defaults | None = None) -> Declared:
    """The pipelines of ``path`` that have no problem, and the problems of the others (an entry whose lines are
    not YAML is a problem of its pipeline). A file that cannot be read, has no document, or is not a list of
    pipelines, raises :class:`PipelinesError`."""
    document, set_aside = _read(path)
    declared = check(document, path, defaults or Defaults())
    if not set_aside:
        return declared
    unreadable = {problem.pipeline for problem in set_aside}  # a good entry of the same name is not the one
    return replace(
        declared,
        pipelines=[p for p in declared.pipelines if p.name not in unreadable],
        problems=[*set_aside, *declared.problems],
    )


def parse(document: Any, path: Path, defaults: Defaults) -> list[Pipeline]:
    """The pipelines of the parsed file ``document`` (read from ``path``; contract files are beside it)."""
    declared = check(document, path, defaults)
    if declared.problems:
        raise PipelinesError(declared.lines())
    return declared.pipelines


def check(document: Any, path: Path, defaults: Defaults) -> Declared:
    """Check the parsed file ``document`` (read from ``path``) entry by entry: see :class:`Declared`."""
    problems: list[Problem] = []
    broken: set[int] = set()  # entries whose shape is wrong: their contracts are not checked further
    for place, line in _shape_problems(document, path.name):
        index = place[1] if len(place) > 1 and place[0] == "pipelines" else -1
        problems.append(Problem(_entry_name(document, index), line))
        broken.add(index)
    if -1 in broken:  # the file itself is not a list of pipelines
        raise PipelinesError([problem.line for problem in problems])
    found: list[tuple[Mapping[str, Any], str, Mapping[str, Any]]] = []  # entry, topic, schema
    names: set[str] = set()
    topics: dict[str, tuple[str, str]] = {}  # Kafka's key of a topic: the pipeline that declared it first, the topic
    readers: dict[str, tuple[str, ...]] = {}
    topic_of: dict[str, str] = {}
    for index, entry in enumerate(document["pipelines"]):
        if index in broken:
            continue
        name = entry["name"]
        where = f"{path.name}: pipeline {name!r}"
        if name in names:
            problems.append(Problem(name, f"{where}: name: another pipeline has this name; each name is used once"))
            continue
        names.add(name)
        taken = _reserved(name)
        if taken:
            problems.append(Problem(name, f"{where}: name: {name!r} {taken}, and a pipeline's name names its "
                                          "PostgreSQL schema and its folder of the lake; choose another"))  # fmt: skip
            continue
        topic = PipelineNames(name).topic(entry.get("topic"), defaults.events_topic)
        lines = []
        claimed = topics.get(kafka_topic_key(topic))
        if claimed:
            same = "" if claimed[1] == topic else f" (as {claimed[1]!r}: Kafka treats '.' and '_' in a name as one)"
            lines.append(
                f"topic: {topic!r} is pipeline {claimed[0]!r}'s topic already{same}; a topic feeds one pipeline (its "
                "offsets are that pipeline's proof of coverage)"
            )
        topics.setdefault(kafka_topic_key(topic), (name, topic))
        readers[kafka_topic_key(topic)] = (*readers.get(kafka_topic_key(topic), ()), name)
        topic_of.setdefault(name, topic)
        # The contract's schema is read once (a file beside this one, or inline) and checked first.
        schema, problem = _contract_schema(entry["contract"]["schema"], path.parent)
        lines += [f"contract.schema: {problem}"] if problem else list(_entry_problems(entry, schema))
        problems += [Problem(name, f"{where}: {line}") for line in lines]
        if not lines:
            found.append((entry, topic, schema))
    failed = {problem.pipeline for problem in problems}
    pipelines = [
        _pipeline(entry, topic, schema, defaults) for entry, topic, schema in found if entry["name"] not in failed
    ]
    return Declared(pipelines, problems, readers, topic_of)


def _reserved(name: str) -> str | None:
    """Why ``name`` may not be a pipeline's (:data:`RESERVED_NAMES`), or None."""
    return RESERVED_NAMES["public"] if name.startswith("pg_") else RESERVED_NAMES.get(name)


def may_name_a_pipeline(name: str) -> bool:
    """Whether ``name`` is one a pipeline may have: :data:`NAME_PATTERN`, whole, and not reserved."""
    return re.fullmatch(NAME_PATTERN, name) is not None and _reserved(name) is None


def kafka_topic_key(topic: str) -> str:
    """What Kafka compares topic names by: it refuses a topic whose name differs from another's only in '.'
    against '_' (their metric names would be one)."""
    return topic.replace(".", "_")


def _entry_name(document: Any, index: int) -> str | None:
    """The name of the file's entry ``index``, when it has one."""
    try:
        name = document["pipelines"][index]["name"]
    except (TypeError, KeyError, IndexError):
        return None
    return name if index >= 0 and isinstance(name, str) else None


def _read(path: Path) -> tuple[Any, list[Problem]]:
    """The document of the file at ``path``, and a problem for each entry whose lines are not YAML
    (:mod:`spark_jobs.pipelines_file`); a file with no document raises :class:`PipelinesError`."""
    from spark_jobs.pipelines_file import WholeFileError, read_document

    try:
        document, set_aside = read_document(path)
    except FileNotFoundError:
        raise PipelinesError([f"{path}: no such file; set TIDEMARK_PIPELINES to your pipelines file"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PipelinesError([f"{path}: cannot be read ({exc})"]) from None
    except WholeFileError as exc:
        raise PipelinesError([str(exc)]) from None
    return document, [Problem(entry.name, entry.line) for entry in set_aside]


def _whole_pattern(validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
    """JSON Schema's ``pattern``, matched against the whole text. The standard keyword searches, and Python's
    ``$`` also matches before a final newline: ``"web\\n"`` would pass ``^[a-z]+$`` beside ``web`` and name
    the same PostgreSQL schema at run time."""
    from jsonschema import ValidationError

    if isinstance(instance, str) and not re.fullmatch(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _shape_problems(document: Any, file_name: str) -> Iterator[tuple[list, str]]:
    """Where ``document`` breaks :data:`CONFIG_SCHEMA` and the line that says how, once per place and rule."""
    from jsonschema import Draft202012Validator, validators

    whole = validators.extend(Draft202012Validator, {"pattern": _whole_pattern})
    validator = whole(CONFIG_SCHEMA)
    reported: set[tuple] = set()
    for error in sorted(validator.iter_errors(document), key=lambda e: [str(p) for p in e.absolute_path]):
        place = list(error.absolute_path)
        if (*place, error.validator) in reported:
            continue
        reported.add((*place, error.validator))
        yield place, f"{file_name}: {_place(document, place)}{_message(error)}"


def _place(document: Any, place: list) -> str:
    """'pipeline 'web': contract.event_id: ' for the path ['pipelines', 1, 'contract', 'event_id']."""
    if len(place) < 2 or place[0] != "pipelines":
        return "".join(f"{p}: " for p in place[:1])
    entry = document["pipelines"][place[1]]
    name = entry.get("name") if isinstance(entry, dict) else None
    who = f"pipeline {name!r}" if isinstance(name, str) else f"pipeline {place[1] + 1}"
    rest = ".".join(str(p) for p in place[2:])
    return f"{who}: " + (f"{rest}: " if rest else "")


def _message(error: Any) -> str:
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(known))
        return f"unknown field {', '.join(map(repr, unknown))}" + (f" (known: {', '.join(known)})" if known else "")
    if error.validator == "required":
        return f"{error.message.split(' is a required')[0]} is missing"
    must = error.schema.get("x-must")
    return must if must else error.message


def _entry_problems(entry: Mapping[str, Any], schema: Mapping[str, Any]) -> Iterator[str]:
    """What the file's shape cannot say about one pipeline: its contract, and its options' values."""
    contract = entry["contract"]
    for role in ROLES:
        if role not in contract:
            continue
        declared = _declared(schema, contract[role])
        if declared is None:
            yield f"contract.{role}: {contract[role]!r} is not a property the schema declares"
            continue
        if "string" not in _types(declared):
            declared_as = "/".join(_types(declared)) or "anything"
            yield f"contract.{role}: {contract[role]!r} is declared as {declared_as}; a role's value must be a string"
            continue
        if len(_types(declared)) > 1:
            yield f"contract.{role}: {contract[role]!r} may be {'/'.join(_types(declared))}; declare it a string"
        if role in REQUIRED_ROLES and not _required(schema, contract[role]):
            yield f"contract.{role}: {contract[role]!r} is not required by the schema; a record needs its {role}"
        if role == "event_time" and declared.get("format", "date-time") != "date-time":
            yield f"contract.event_time: {contract[role]!r} has format {declared['format']!r}; it must be a date-time"
    if contract.get("properties"):
        declared = _declared(schema, contract["properties"])
        if declared is None:
            yield f"contract.properties: {contract['properties']!r} is not a property the schema declares"
        elif "object" not in _types(declared):
            yield f"contract.properties: {contract['properties']!r} is not declared as an object"
    names: dict[str, str] = {}
    for dotted, type_ in contract.get("columns", {}).items():
        pointer = _dotted_pointer(dotted)
        column = dotted.replace(".", "_")
        if not re.fullmatch("[a-z_][a-z0-9_]*", column):
            yield f"contract.columns.{dotted}: a column's path is lower-case words joined by '.', e.g. page.url"
        elif column in RESERVED_COLUMNS:
            yield f"contract.columns.{dotted}: {column!r} is a column every events table has; pick another field"
        elif column in WORKING_COLUMNS:
            yield f"contract.columns.{dotted}: {column!r} is a name tidemark uses while writing; pick another field"
        elif column in names:
            yield f"contract.columns.{dotted}: makes the column {column!r}, as {names[column]} does"
        elif _declared(schema, pointer) is None:
            yield f"contract.columns.{dotted}: {pointer!r} is not a property the schema declares"
        elif not (type_ in COLUMN_TYPES or DECIMAL_PATTERN.fullmatch(type_) and _decimal_fits(type_)):
            yield (
                f"contract.columns.{dotted}: {type_!r} is not a column type: {', '.join(COLUMN_TYPES)} or "
                "decimal(p,s) (p up to 38, s up to p)"
            )
        names.setdefault(column, dotted)
    yield from option_problems(Pipeline, entry)


def _contract_schema(value: Any, folder: Path) -> tuple[dict[str, Any], str | None]:
    """The contract's JSON Schema (inline, or the file ``value`` names beside the config), or a problem."""
    from jsonschema import Draft202012Validator, SchemaError

    if isinstance(value, str):
        path = folder / value
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            return {}, f"{value!r}: no such file beside the pipelines file"
        try:
            import yaml

            value = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as exc:
            return {}, f"{value!r} is not valid JSON or YAML: {str(exc).splitlines()[0]}"
    if not isinstance(value, dict):
        return {}, "is not a JSON Schema (a mapping)"
    declared_draft = value.get("$schema", Draft202012Validator.META_SCHEMA["$id"])
    if declared_draft.rstrip("#") != Draft202012Validator.META_SCHEMA["$id"].rstrip("#"):
        return {}, f"$schema {declared_draft!r}: tidemark reads JSON Schema draft 2020-12"
    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        message = exc.message
        if exc.absolute_path and exc.absolute_path[-1] == "type":  # the meta-schema's anyOf names no type
            message = f"{exc.instance!r} is not a JSON Schema type: {', '.join(JSON_TYPES)}, or a list of them"
        return {}, f"is not a valid JSON Schema: {where + ': ' if where else ''}{message}"
    if _types(value) != ("object",):
        return {}, 'must declare the value an object ("type": "object")'
    return value, None


def _resolve(schema: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    """``node`` with a local ``$ref`` ("#/$defs/...") followed."""
    for _ in range(32):
        ref = node.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#"):
            return node
        target: Any = schema
        for token in _tokens(ref[1:]):
            target = target.get(token, {}) if isinstance(target, dict) else {}
        node = target
    return node


def _tokens(pointer: str) -> list[str]:
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]] if pointer else []


def _walk(schema: Mapping[str, Any], pointer: str) -> Iterator[tuple[Mapping[str, Any], str]]:
    """Each (object schema, property name) along ``pointer``; stops where the schema declares nothing."""
    node = _resolve(schema, schema)
    for token in _tokens(pointer):
        properties = node.get("properties", {})
        if token not in properties:
            yield node, ""
            return
        yield node, token
        node = _resolve(schema, properties[token])


def _declared(schema: Mapping[str, Any], pointer: str) -> Mapping[str, Any] | None:
    """The schema of the property at ``pointer``, None when the schema does not declare it."""
    node = _resolve(schema, schema)
    for parent, token in _walk(schema, pointer):
        if not token:
            return None
        node = _resolve(schema, parent["properties"][token])
    return node


def _required(schema: Mapping[str, Any], pointer: str) -> bool:
    return all(token and token in parent.get("required", ()) for parent, token in _walk(schema, pointer))


def _types(node: Mapping[str, Any]) -> tuple[str, ...]:
    declared = node.get("type", ())
    return (declared,) if isinstance(declared, str) else tuple(declared)


def _dotted_pointer(dotted: str) -> str:
    return "/" + "/".join(dotted.split("."))


def _decimal_fits(type_: str) -> bool:
    precision, scale = map(int, DECIMAL_PATTERN.fullmatch(type_).groups())  # type: ignore[union-attr]
    return 0 < precision <= 38 and scale <= precision


def _pipeline(entry: Mapping[str, Any], topic: str, schema: Mapping[str, Any], defaults: Defaults) -> Pipeline:
    raw = entry["contract"]
    columns = tuple(
        Column(dotted.replace(".", "_"), _dotted_pointer(dotted), type_.replace(" ", ""))
        for dotted, type_ in raw.get("columns", {}).items()
    )
    contract = Contract(
        schema=schema,
        event_id=raw["event_id"],
        entity_id=raw["entity_id"],
        event_time=raw["event_time"],
        event_type=raw.get("event_type"),
        properties=raw.get("properties"),
        key_is_entity_id=raw.get("key_is_entity_id", True),
        columns=columns,
    )
    return Pipeline(entry["name"], topic, contract, **read_options(Pipeline, entry, defaults))
