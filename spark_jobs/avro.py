"""Avro pipelines at run time: the reader schema a run resolves and checks, and the writer schemas a batch names.

An Avro pipeline's records are Avro in Confluent's wire format (a zero byte, the writer schema's 4-byte id,
the body). Before any work a run resolves its contract (:func:`reader_contract`): the newest version of the
contract's subject becomes the reader schema, and the roles and typed columns must be fields of it of a
usable type (a role a string, the event time a string or a timestamp, the properties a record or a map).
The JVM check (``io.tidemark.contract.AvroCheck``) decodes each record with the writer schema its id names,
which the tasks fetch from the registry once per id (an id the registry does not know is asked again by the
next batch, so a schema registered mid-run is decoded from then on), resolves it to the reader, and checks
the result as a JSON record. docs/design.md, "Avro pipelines".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from spark_jobs.errors import ConfigError
from spark_jobs.schema_registry import RegistryUnavailable, SchemaRegistry

if TYPE_CHECKING:
    from spark_jobs.pipelines import Contract


# What the JVM check raises when the registry fails a task's request for a writer schema (RegistrySchemas.java).
_REGISTRY_FAILED = re.compile(
    r"the schema registry at (\S+) (does not answer|answered HTTP \d+ for schema id \d+|answered schema id \d+ oddly)"
)


def registry_failure(exc: BaseException) -> RegistryUnavailable | None:
    """The one-line error for a batch whose tasks could not get a writer schema from the registry (the registry
    stopped answering after the run resolved its reader schema), or None when ``exc`` is something else. The
    records are decoded as the batch is planned, before its first write."""
    found = _REGISTRY_FAILED.search(str(exc))
    if found is None:
        return None
    return RegistryUnavailable(
        f"{found.group(0)} while the batch read its records' writer schemas: nothing of the batch was written; "
        "run again once the registry answers"
    )


def reader_contract(contract: Contract, registry: SchemaRegistry) -> Contract:
    """``contract`` with its reader schema: for an Avro contract, the newest version of its subject, checked
    against the roles and columns (a :class:`ConfigError` naming each problem otherwise); a JSON one as it is."""
    if not contract.avro:
        return contract
    assert contract.subject is not None  # an Avro contract always names one (default <topic>-value)
    latest = registry.latest(contract.subject)
    schema = json.loads(latest.schema)
    problems = list(reader_problems(contract, schema))
    if problems:
        raise ConfigError(
            f"version {latest.version} of subject {contract.subject!r} in the schema registry at {registry.shown} "
            f"does not fit the contract: {'; '.join(problems)}. Fix the contract's pointers, or register a schema "
            "that has these fields"
        )
    return replace(contract, schema=schema, schema_version=latest.version)  # a record's schema: a mapping


def reader_problems(contract: Contract, schema: Any) -> Iterator[str]:
    """What in ``contract`` the Avro ``schema`` (parsed) cannot give: a phrase each."""
    types = _Types(schema)
    if types.kind(schema) != ("record", False):
        yield "the schema is not a record"
        return
    wanted = {"event_id": ("string",), "entity_id": ("string",), "event_time": ("string", "timestamp")}
    for role in ("event_id", "entity_id", "event_time", "event_type"):
        pointer = getattr(contract, role)
        if pointer is None:
            continue
        node = types.field(pointer)
        if node is None:
            yield f"{role} {pointer!r} is not a field of the schema"
            continue
        kind, nullable = types.kind(node)
        if kind not in wanted.get(role, ("string",)):
            yield f"{role} {pointer!r} is {kind}; it must be {' or '.join(wanted.get(role, ('string',)))}"
        elif nullable and role != "event_type":
            yield f"{role} {pointer!r} may be null; a record needs its {role}"
    if contract.properties:
        node = types.field(contract.properties)
        if node is None or types.kind(node)[0] not in ("record", "map"):
            yield f"properties {contract.properties!r} is not a record or map field of the schema"
    for column in contract.columns:
        if types.field(column.pointer) is None:
            yield f"the typed column {column.name} ({column.pointer!r}) is not a field of the schema"


class _Types:
    """The named types of an Avro schema, to follow a JSON pointer through its records."""

    def __init__(self, schema: Any) -> None:
        self.root = schema
        self.named: dict[str, Any] = {}
        self._collect(schema, "")

    def _collect(self, node: Any, namespace: str) -> None:
        if isinstance(node, list):
            for branch in node:
                self._collect(branch, namespace)
        elif isinstance(node, dict):
            kind = node.get("type")
            if kind in ("record", "error", "enum", "fixed") and isinstance(node.get("name"), str):
                name = node["name"]
                space = node.get("namespace", namespace) if "." not in name else name.rsplit(".", 1)[0]
                full = name if "." in name else (f"{space}.{name}" if space else name)
                self.named[full] = self.named[full.rsplit(".", 1)[-1]] = node
                namespace = space or ""
            for child in (*(f.get("type") for f in node.get("fields", []) if isinstance(f, dict)), node.get("items"),
                          node.get("values")):  # fmt: skip
                if child is not None:
                    self._collect(child, namespace)
            if isinstance(kind, (dict, list)):
                self._collect(kind, namespace)

    def _resolve(self, node: Any) -> Any:
        return self.named.get(node, node) if isinstance(node, str) else node

    def branches(self, node: Any) -> tuple[list[Any], bool]:
        """The non-null branches of ``node`` (itself when not a union), and whether it may be null."""
        node = self._resolve(node)
        if isinstance(node, list):
            others = [self._resolve(b) for b in node if self._resolve(b) != "null"]
            return others, len(others) < len(node)
        return [node], node == "null"

    def kind(self, node: Any) -> tuple[str, bool]:
        """What ``node``'s value is once written as JSON (string, timestamp, record, map, ...), and whether null."""
        branches, nullable = self.branches(node)
        kinds = {self._kind_of(b) for b in branches}
        return (kinds.pop() if len(kinds) == 1 else "a union of " + "/".join(sorted(kinds))), nullable

    def _kind_of(self, node: Any) -> str:
        if isinstance(node, dict) and isinstance(node.get("type"), (str, dict, list)):
            logical = node.get("logicalType")
            if logical in ("timestamp-millis", "timestamp-micros"):
                return "timestamp"
            if logical == "uuid":
                return "string"
            kind = node["type"]
            if kind in ("enum",):
                return "string"
            if kind in ("record", "error", "map", "array", "fixed"):
                return "record" if kind == "error" else kind
            return self._kind_of(self._resolve(kind)) if not isinstance(kind, list) else "union"
        return node if isinstance(node, str) else "unknown"

    def field(self, pointer: str) -> Any:
        """The type of the field at the JSON pointer ``pointer`` (through records, nullable ones too), or None."""
        from spark_jobs.contract_schema import tokens

        node: Any = None
        records, _ = self.branches(self.root)
        for token in tokens(pointer):
            record = next((r for r in records if isinstance(r, dict) and r.get("type") in ("record", "error")), None)
            fields = {f.get("name"): f for f in (record or {}).get("fields", []) if isinstance(f, dict)}
            if token not in fields:
                return None
            node = fields[token]["type"]
            records, _ = self.branches(node)
        return node
