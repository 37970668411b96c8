"""The pipelines file's own shape, as a JSON Schema, and where a document breaks it: one line per place and rule.

:data:`CONFIG_SCHEMA` says what a pipelines file is: a mapping whose one field, ``pipelines``, lists at
least one entry of a name, a topic, a contract, and the options :class:`~spark_jobs.pipelines.Pipeline`
declares (each option's schema is its kind's). ``x-must`` is the one line shown when a value breaks its
schema; :func:`shape_problems` names the file, the pipeline and the field. What a schema cannot say
(names and topics used once, the contract against its own schema) is ``spark_jobs.pipelines_check``'s.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from spark_jobs.contract_schema import COLUMN_TYPES
from spark_jobs.pipeline_options import options
from spark_jobs.pipelines import ROLES, Pipeline

# A pipeline's name names its PostgreSQL schema, its folder of Delta tables and its DAGs.
NAME_PATTERN = "^[a-z][a-z0-9_]{0,39}$"
# Kafka's rule for topic names.
TOPIC_PATTERN = "^[A-Za-z0-9._-]{1,249}$"
_POINTER = "^(/([^~]|~[01])*)*$"
# A registry subject (Confluent's TopicNameStrategy names it `<topic>-value`): printable ASCII, no spaces.
SUBJECT_PATTERN = "^[!-~]{1,255}$"

_CONTRACT: dict[str, Any] = {
    "type": "object",
    # `schema` is required of a JSON contract and refused in an Avro one (spark_jobs.pipelines_check).
    "required": ["event_id", "entity_id", "event_time"],
    "additionalProperties": False,
    "x-must": "must be a mapping with schema (JSON) or format: avro, event_id, entity_id and event_time",
    "properties": {
        "format": {"enum": ["json", "avro"], "x-must": "must be json (the default) or avro"},
        "schema": {"type": ["object", "string"], "x-must": "must be a JSON Schema, or the path of a file holding one"},
        "subject": {
            "type": "string",
            "pattern": SUBJECT_PATTERN,
            "x-must": "must be a schema registry subject: printable characters, no spaces, at most 255",
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
                "x-must": "must be a Spark SQL type: " + ", ".join(COLUMN_TYPES) + " or decimal(p,s)",
            },
        },
    },
}
_ENTRY: dict[str, Any] = {
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
        "contract": _CONTRACT,
        **{f.name: f.metadata["kind"].schema for f in options(Pipeline)},
    },
}
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
            "items": _ENTRY,
        }
    },
}


def shape_problems(document: Any, file_name: str) -> Iterator[tuple[list, str]]:
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


def _whole_pattern(validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
    """JSON Schema's ``pattern``, matched against the whole text. The standard keyword searches, and Python's
    ``$`` also matches before a final newline: ``"web\\n"`` would pass ``^[a-z]+$`` beside ``web`` and name
    the same PostgreSQL schema at run time."""
    from jsonschema import ValidationError

    if isinstance(instance, str) and not re.fullmatch(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


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
