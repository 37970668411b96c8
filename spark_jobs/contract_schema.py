"""A pipeline's contract against its JSON Schema: the schema read and checked, and the roles and columns in it.

A contract's ``schema`` is a JSON Schema (draft 2020-12) of the record's value, inline in the pipelines
file or in a file beside it (:func:`read_schema`); its root declares an object. Each role (event id,
entity id, event time, event type) points at a property the schema declares, as a string; the event id,
entity id and event time are required at every step of their path; a typed column points at a declared
property and has a Spark SQL type (:func:`contract_problems`). :func:`declared` follows a JSON pointer
through ``properties`` and local ``$ref``s, as the producer's samples do too. docs/design.md, "Pipelines
declared in a file".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from spark_jobs.contract import EVENT_COLUMNS, WORKING_COLUMNS
from spark_jobs.pipelines import ROLES, Column, Contract

REQUIRED_ROLES = ROLES[:3]
# The Spark SQL types a typed column may have.
JSON_TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")
COLUMN_TYPES = ("string", "boolean", "int", "bigint", "long", "double", "date", "timestamp")
DECIMAL_PATTERN = re.compile(r"decimal\((\d{1,2}),\s*(\d{1,2})\)")
# Columns every pipeline's events table has; a typed column may not take one of these names.
RESERVED_COLUMNS = EVENT_COLUMNS


def read_text(path: Path) -> str:
    """A schema file's text (how :func:`read_schema` reads one unless told otherwise)."""
    return path.read_text(encoding="utf-8")


def read_schema(value: Any, folder: Path, read: Callable[[Path], str] = read_text) -> tuple[dict[str, Any], str | None]:
    """The contract's JSON Schema (inline, or the file ``value`` names in ``folder``, read with ``read``), or
    a problem."""
    from jsonschema import Draft202012Validator, SchemaError

    if isinstance(value, str):
        value, problem = _schema_file(folder / value, value, read)
        if problem:
            return {}, problem
    if not isinstance(value, dict):
        return {}, "is not a JSON Schema (a mapping)"
    draft: str = Draft202012Validator.META_SCHEMA["$id"]
    declared_draft = value.get("$schema", draft)
    if declared_draft.rstrip("#") != draft.rstrip("#"):
        return {}, f"$schema {declared_draft!r}: tidemark reads JSON Schema draft 2020-12"
    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        message = exc.message
        if exc.absolute_path and exc.absolute_path[-1] == "type":  # the meta-schema's anyOf names no type
            message = f"{exc.instance!r} is not a JSON Schema type: {', '.join(JSON_TYPES)}, or a list of them"
        return {}, f"is not a valid JSON Schema: {where + ': ' if where else ''}{message}"
    if types(value) != ("object",):
        return {}, 'must declare the value an object ("type": "object")'
    return value, None


def _schema_file(path: Path, name: str, read: Callable[[Path], str]) -> tuple[Any, str | None]:
    """The document of the schema file ``name`` at ``path`` (JSON, or YAML), or a problem."""
    import yaml

    try:
        text = read(path)
    except OSError:
        return None, f"{name!r}: no such file beside the pipelines file"
    try:
        return (json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)), None
    except (ValueError, yaml.YAMLError) as exc:
        return None, f"{name!r} is not valid JSON or YAML: {str(exc).splitlines()[0]}"


def avro_problem(contract: Mapping[str, Any]) -> str | None:
    """What an Avro ``contract`` may not say in the file (its roles and columns are checked against the
    registry's reader schema when a run starts: ``spark_jobs.avro``)."""
    if "schema" in contract:
        return (
            "contract.schema: an Avro pipeline's schema is its subject's in the schema registry (`subject`, "
            "default <topic>-value); remove `schema`"
        )
    return None


def contract_problems(contract: Mapping[str, Any], schema: Mapping[str, Any]) -> Iterator[str]:
    """What the file's shape cannot say about an entry's ``contract`` against its ``schema``: a line each. An
    Avro contract's roles and columns are checked against the registry's reader schema when a run starts
    (``spark_jobs.avro``); here only its columns' names and types."""
    avro = contract.get("format") == "avro"
    for role in ROLES:
        if role in contract and not avro:
            yield from (f"contract.{role}: {line}" for line in _role_problems(role, contract[role], schema))
    pointer = contract.get("properties")
    if pointer and not avro:
        node = declared(schema, pointer)
        if node is None:
            yield f"contract.properties: {pointer!r} is not a property the schema declares"
        elif "object" not in types(node):
            yield f"contract.properties: {pointer!r} is not declared as an object"
    names: dict[str, str] = {}  # a column's name: the path that made it first
    for dotted, type_ in contract.get("columns", {}).items():
        problem = _column_problem(dotted, type_, names, None if avro else schema)
        if problem:
            yield f"contract.columns.{dotted}: {problem}"
        names.setdefault(dotted.replace(".", "_"), dotted)


def _role_problems(role: str, pointer: str, schema: Mapping[str, Any]) -> Iterator[str]:
    node = declared(schema, pointer)
    if node is None:
        yield f"{pointer!r} is not a property the schema declares"
        return
    kinds = types(node)
    if "string" not in kinds:
        yield f"{pointer!r} is declared as {'/'.join(kinds) or 'anything'}; a role's value must be a string"
        return
    if len(kinds) > 1:
        yield f"{pointer!r} may be {'/'.join(kinds)}; declare it a string"
    if role in REQUIRED_ROLES and not required(schema, pointer):
        yield f"{pointer!r} is not required by the schema; a record needs its {role}"
    if role == "event_time" and node.get("format", "date-time") != "date-time":
        yield f"{pointer!r} has format {node['format']!r}; it must be a date-time"


def _column_problem(dotted: str, type_: str, names: Mapping[str, str], schema: Mapping[str, Any] | None) -> str | None:
    """What is wrong with the typed column of the path ``dotted`` as ``type_``, given the ``names`` taken
    (``schema`` None: the field is not looked up, an Avro contract's is at run time)."""
    column = dotted.replace(".", "_")
    if not re.fullmatch("[a-z_][a-z0-9_]*", column):
        return "a column's path is lower-case words joined by '.', e.g. page.url"
    if column in RESERVED_COLUMNS:
        return f"{column!r} is a column every events table has; pick another field"
    if column in WORKING_COLUMNS:
        return f"{column!r} is a name tidemark uses while writing; pick another field"
    if column in names:
        return f"makes the column {column!r}, as {names[column]} does"
    if schema is not None and declared(schema, _dotted_pointer(dotted)) is None:
        return f"{_dotted_pointer(dotted)!r} is not a property the schema declares"
    if not (type_ in COLUMN_TYPES or DECIMAL_PATTERN.fullmatch(type_) and _decimal_fits(type_)):
        return f"{type_!r} is not a column type: {', '.join(COLUMN_TYPES)} or decimal(p,s) (p up to 38, s up to p)"
    return None


def contract_of(raw: Mapping[str, Any], schema: Mapping[str, Any], topic: str) -> Contract:
    """The contract an entry's ``contract`` mapping declares, its schema being ``schema`` (read and checked; an
    Avro contract's is empty until a run resolves it) and its pipeline's topic ``topic``."""
    avro = raw.get("format") == "avro"
    columns = tuple(
        Column(dotted.replace(".", "_"), _dotted_pointer(dotted), type_.replace(" ", ""))
        for dotted, type_ in raw.get("columns", {}).items()
    )
    return Contract(
        schema=schema,
        event_id=raw["event_id"],
        entity_id=raw["entity_id"],
        event_time=raw["event_time"],
        event_type=raw.get("event_type"),
        properties=raw.get("properties"),
        key_is_entity_id=raw.get("key_is_entity_id", True),
        columns=columns,
        format=raw.get("format", "json"),
        subject=raw.get("subject", f"{topic}-value") if avro else None,
    )


def resolve(schema: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    """``node`` with a local ``$ref`` ("#/$defs/...") followed."""
    for _ in range(32):
        ref = node.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#"):
            return node
        target: Any = schema
        for token in tokens(ref[1:]):
            target = target.get(token, {}) if isinstance(target, dict) else {}
        node = target
    return node


def tokens(pointer: str) -> list[str]:
    """The reference tokens of the JSON pointer ``pointer`` (RFC 6901), unescaped."""
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]] if pointer else []


def _walk(schema: Mapping[str, Any], pointer: str) -> Iterator[tuple[Mapping[str, Any], str]]:
    """Each (object schema, property name) along ``pointer``; stops where the schema declares nothing."""
    node = resolve(schema, schema)
    for token in tokens(pointer):
        properties = node.get("properties", {})
        if token not in properties:
            yield node, ""
            return
        yield node, token
        node = resolve(schema, properties[token])


def declared(schema: Mapping[str, Any], pointer: str) -> Mapping[str, Any] | None:
    """The schema of the property at ``pointer``, None when the schema does not declare it."""
    node = resolve(schema, schema)
    for parent, token in _walk(schema, pointer):
        if not token:
            return None
        node = resolve(schema, parent["properties"][token])
    return node


def required(schema: Mapping[str, Any], pointer: str) -> bool:
    """Whether the property at ``pointer`` is required at every step of its path."""
    return all(token and token in parent.get("required", ()) for parent, token in _walk(schema, pointer))


def types(node: Mapping[str, Any]) -> tuple[str, ...]:
    """The types a schema ``node`` declares (none: any)."""
    kind = node.get("type", ())
    return (kind,) if isinstance(kind, str) else tuple(kind)


def _dotted_pointer(dotted: str) -> str:
    return "/" + "/".join(dotted.split("."))


def _decimal_fits(type_: str) -> bool:
    precision, scale = map(int, DECIMAL_PATTERN.fullmatch(type_).groups())  # type: ignore[union-attr]
    return 0 < precision <= 38 and scale <= precision
