"""A pipeline as its entry in the pipelines file declares it: its topic, its contract and its options.

``pipelines.yaml`` (the setting ``TIDEMARK_PIPELINES``) lists the pipelines; ``spark_jobs.pipelines_file``
reads it and ``spark_jobs.pipelines_check`` checks it into the values here. A pipeline's **contract**
(:class:`Contract`) is a JSON Schema (draft 2020-12) of the record's value, plus where its roles live in
the value (JSON pointers): the event id, the entity id (the session key), the event time and, optionally,
the event type. ``columns`` name the fields that become typed columns of ``events``; ``properties`` is the
part of the value kept as JSON text. The checks every record gets whatever the contract says (UTF-8, one
JSON document, its size, a usable entity id and event time) are in ``spark_jobs.validation``.

A pipeline's **options** (its session rules, dedupe horizon, batch cap, schedule and alerts) are the
fields of :class:`Pipeline` declared by :func:`~spark_jobs.pipeline_options.option`, each once; what an
entry leaves out comes from :class:`Defaults`, the deployment's settings. docs/design.md, "Pipelines
declared in a file".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, make_dataclass
from typing import Any

from spark_jobs.contract import EVENT_COLUMNS, TABLE_SCHEMAS, SessionRules
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
    options,
)

# The roles a contract points at in the value; the first three every record needs.
ROLES = ("event_id", "entity_id", "event_time", "event_type")


@dataclass(frozen=True)
class Column:
    """A typed column of ``events``: ``name`` holds the value at ``pointer`` as ``type``."""

    name: str
    pointer: str
    type: str


@dataclass(frozen=True)
class Contract:
    """What a valid record's value is (``schema``) and where its roles are (JSON pointers).

    ``format``: ``json`` (the value is a JSON document; ``schema`` its JSON Schema) or ``avro`` (Avro in
    Confluent's wire format; the reader schema is the newest version of the registry's ``subject``, which
    a run resolves before any work: ``spark_jobs.avro.reader_contract`` fills ``schema`` with it and
    ``schema_version`` with its version, both recorded with each batch's contract)."""

    schema: Mapping[str, Any]
    event_id: str
    entity_id: str
    event_time: str
    event_type: str | None = None
    properties: str | None = None
    key_is_entity_id: bool = True
    columns: tuple[Column, ...] = ()
    format: str = "json"
    subject: str | None = None
    schema_version: int | None = None

    @property
    def avro(self) -> bool:
        return self.format == "avro"

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
        """The contract as the file declares it (with its defaults filled in); an Avro contract's with its format,
        subject and the reader schema's version (a JSON contract's document is the same as before Avro)."""
        avro = {"format": self.format, "subject": self.subject, "schema_version": self.schema_version}
        return {
            "schema": self.schema,
            **{role: getattr(self, role) for role in ROLES if getattr(self, role) is not None},
            "properties": self.properties,
            "key_is_entity_id": self.key_is_entity_id,
            "columns": {c.pointer: c.type for c in self.columns},
            **(avro if self.avro else {}),
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
    if stored.get("format", "json") != new.get("format", "json"):
        compatible = False
        what.append(f"the format changed from {stored.get('format', 'json')} to {new.get('format', 'json')}")
    if stored.get("subject") != new.get("subject") and compatible:
        what.append(f"the subject {new.get('subject')!r}")
    if new.get("schema_version") is not None and stored.get("schema_version") != new.get("schema_version"):
        what.append(f"the reader schema, version {new['schema_version']} of {new.get('subject')!r}")
    elif stored.get("schema") != new["schema"]:
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
    # The options: a key of the entry each, and a row of docs/configuration.md's options table (settings_tables).
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
    # Spark's maxOffsetsPerTrigger. `auto`: as many as the driver's memory keeps, given the records' size
    # (spark_jobs.batch_size): fewer, larger batches, each paying a batch's fixed seconds once.
    max_offsets_per_trigger: int | str = option(
        RECORDS,
        "auto",
        "records per batch of a scheduled run at most: `auto` (as many as the driver's memory holds, given the "
        'size of the topic\'s records: docs/operations.md, "Batch size"), a number, or 0 (no cap)',
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
