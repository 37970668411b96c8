"""The message contract on real Spark: every malformed kind gets its own reason, valid records pass."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from spark_jobs.contract import MAX_VALUE_BYTES
from spark_jobs.pipelines import EVENTS_CONTRACT, Contract
from spark_jobs.validation import parse_records
from tidemark.producer import MALFORMED_KINDS, ProduceSpec, generate

ARRIVAL = datetime(2026, 3, 1, tzinfo=UTC)


def kafka_rows(spark, records: dict[int, tuple[bytes | None, bytes | None]]):  # a DataFrame
    """Rows as Spark's Kafka source gives them: offset -> (key, value), one partition, one arrival."""
    return spark.createDataFrame(
        [("events", 0, offset, ARRIVAL, key, value) for offset, (key, value) in records.items()],
        "topic string, partition int, offset long, timestamp timestamp, key binary, value binary",
    )


def test_each_malformed_kind_gets_its_reason_and_valid_records_pass(spark_session) -> None:
    records = list(generate(ProduceSpec(count=1500, entities=20, malformed_rate=0.4, late_rate=0.1, seed=3)))
    raw = kafka_rows(spark_session, {offset: (r.key, r.value) for offset, r in enumerate(records)})
    reasons = {row["offset"]: row["quarantine_reason"] for row in parse_records(raw, EVENTS_CONTRACT).collect()}

    assert len(reasons) == len(records)  # nothing dropped
    seen = set()
    for offset, record in enumerate(records):
        reason = reasons[offset]
        if record.kind.startswith("malformed:"):
            kind = record.kind.split(":", 1)[1]
            seen.add(kind)
            assert reason is not None and reason.startswith(kind), (kind, reason)
        else:
            assert reason is None, (record.kind, reason, record.value[:200])
    assert seen == set(MALFORMED_KINDS), "every malformed kind should occur in the sample"


def test_whitespace_around_a_document_is_allowed_and_only_objects_pass(spark_session) -> None:
    body = (
        '{"event_id": "e1", "entity_id": "u1", "event_type": "click", '
        '"event_time": "2026-03-01T00:00:00+00:00", "properties": {"a": [1, 2]}}'
    )
    values = {
        0: " \t\r\n" + body + "\n",  # JSON allows this whitespace around the document
        1: ' \n[{"event_id": "e1"}]',
        2: "\t 42 ",
        3: '"a string"',
    }
    raw = kafka_rows(spark_session, {offset: (b"u1", value.encode()) for offset, value in values.items()})
    rows = {row["offset"]: row for row in parse_records(raw, EVENTS_CONTRACT).collect()}

    assert rows[0]["quarantine_reason"] is None
    assert (rows[0]["event_id"], rows[0]["properties"]) == ("e1", '{"a":[1,2]}')
    assert [rows[offset]["quarantine_reason"] for offset in (1, 2, 3)] == ["not_an_object"] * 3


def test_text_after_the_object_makes_the_value_invalid_json(spark_session) -> None:
    """Spark's JSON parsers stop after the first document; a value is one document, or quarantined."""
    body = '{"event_id": "e1", "entity_id": "u1", "event_type": "click", "event_time": "2026-03-01T00:00:00+00:00"}'
    values = {
        0: body + " \n",
        1: body + "\n" + body.replace("e1", "e2"),  # two events in one value (newline-delimited)
        2: body + body,
        3: body + ", " + body,
        4: body + ",",
        5: body + " x",
        6: body + "] [" + body,  # closes the brackets a check might wrap the value in
        7: body + "} {" + body,
        8: body + ' "}"',
    }
    raw = kafka_rows(spark_session, {offset: (b"u1", value.encode()) for offset, value in values.items()})
    reasons = {row["offset"]: row["quarantine_reason"] for row in parse_records(raw, EVENTS_CONTRACT).collect()}

    assert reasons[0] is None
    assert {offset: reasons[offset] for offset in values if offset} == {
        offset: "invalid_json: text after the JSON object" for offset in values if offset
    }


def test_properties_are_kept_as_the_variant_writes_them_back(spark_session) -> None:
    """What docs/design.md ("Message contract") tells producers about `properties`' numbers."""
    properties = '{"z": 2.50, "a": 1E2, "big": 123456789012345678901234567890123456789012, "huge": 1e400}'
    value = (
        '{"event_id": "e1", "entity_id": "u1", "event_type": "click", '
        f'"event_time": "2026-03-01T00:00:00+00:00", "properties": {properties}}}'
    )
    raw = kafka_rows(spark_session, {0: (b"u1", value.encode())})
    [row] = parse_records(raw, EVENTS_CONTRACT).collect()

    assert row["quarantine_reason"] is None
    assert row["properties"] == '{"a":100.0,"big":1.2345678901234568E41,"huge":"Infinity","z":2.5}'


# Characters a string or key may hold: every control character, the JSON escapes' own, non-ASCII
# (two- and three-byte UTF-8, a surrogate pair, the line separators JavaScript minds, U+FFFF).
_CHARS = [chr(c) for c in range(0x20)] + list('"\\/ aZ~\x7f\u00e9\u4e8b\u2028\u2029\uffff') + ["\U0001d11e"]
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NUMBERS = (
    "0",
    "-0",
    "7",
    "-12",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "123456789012345678901234567890123456789",
    "1234567890123456789012345678901234567890",
    "0.0",
    "-0.0",
    "2.50",
    "1.000",
    "0.00000000000000000000000000000000000001",
    "3.14159265358979323846264338327950288",
    "1E2",
    "1e-7",
    "2.5e+3",
    "-4.2E-1",
    "1e400",
    "-1e400",
    "1e-400",
    "6.02214076e23",
    "0.1",
    "100",
)


def _json_string(rng, text: str) -> str:
    """``text`` as a JSON string literal, each character written raw, as a short escape or as \\uXXXX."""
    out = []
    for ch in text:
        roll = rng.random()
        if ord(ch) > 0xFFFF:  # a surrogate pair: raw, or both halves escaped
            high, low = divmod(ord(ch) - 0x10000, 0x400)
            out.append(ch if roll < 0.5 else f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04X}")
        elif ch in _SHORT_ESCAPES and (roll < 0.6 or ch in '"\\' or ord(ch) < 0x20):
            out.append(_SHORT_ESCAPES[ch] if roll < 0.8 else f"\\u{ord(ch):04x}")
        elif ord(ch) < 0x20 or roll < 0.2:
            out.append(f"\\u{ord(ch):04x}" if rng.random() < 0.5 else f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _json_value(rng, depth: int) -> str:
    """Random JSON text: objects (keys in any order, unicode and empty ones), arrays, every kind of
    number, strings with every character class, spread with whitespace."""
    space = lambda: rng.choice(("", "", " ", "\n\t "))  # noqa: E731
    kind = rng.randrange(7 if depth < 4 else 5)
    if kind == 0:
        return rng.choice(("null", "true", "false"))
    if kind in (1, 2):
        return rng.choice(_NUMBERS)
    if kind in (3, 4):
        return _json_string(rng, "".join(rng.choice(_CHARS) for _ in range(rng.randrange(6))))
    if kind == 5:
        items = [_json_value(rng, depth + 1) for _ in range(rng.randrange(4))]
        return "[" + ",".join(space() + item + space() for item in items) + "]"
    keys = {"".join(rng.choice(_CHARS[20:]) for _ in range(rng.randrange(4))) for _ in range(rng.randrange(6))}
    fields = [f"{space()}{_json_string(rng, key)}{space()}:{space()}{_json_value(rng, depth + 1)}" for key in keys]
    return "{" + ",".join(fields) + "}"


def test_properties_are_exactly_what_sparks_variant_writes_back(spark_session) -> None:
    """The check writes the properties itself (no Variant column on the way): over 3,000 random
    documents, the text is ``to_json(try_parse_json(text))``'s to the character."""
    import random

    rng = random.Random(47)
    documents: list[str] = []
    while len(documents) < 3000:
        text = _json_value(rng, 1)
        if text.startswith("{"):
            documents.append(text)
    event = '"event_id": "e{n}", "entity_id": "u1", "event_type": "click", "event_time": "2026-03-01T00:00:00Z"'
    raw = kafka_rows(
        spark_session,
        {
            n: (b"u1", ("{" + event.format(n=n) + ', "properties": ' + text + "}").encode())
            for n, text in enumerate(documents)
        },
    )
    written = {row["offset"]: row for row in parse_records(raw, EVENTS_CONTRACT).collect()}
    texts = spark_session.createDataFrame(list(enumerate(documents)), "offset long, text string")
    spark = {
        row["offset"]: row["json"]
        for row in texts.selectExpr("offset", "to_json(try_parse_json(text)) AS json").collect()
    }

    assert all(spark[n] is not None for n in spark), "every document is JSON Spark reads"
    differ = [
        (n, documents[n], spark[n], written[n]["properties"]) for n in spark if written[n]["properties"] != spark[n]
    ]
    assert not differ, f"{len(differ)} documents differ (offset, text, Spark's, the check's): {differ[:3]}"
    assert all(written[n]["quarantine_reason"] is None for n in written)
    # The sample reaches what the writer must get right: escapes, non-ASCII, doubles, decimals, nesting.
    joined = "".join(spark.values())
    for expected in ("\\u0000", "\\n", '\\"', "\\\\", "\u00e9", "\U0001d11e", "E", '"Infinity"', '"-Infinity"', "[{"):
        assert expected in joined, expected


def test_empty_identifying_fields_are_missing_fields(spark_session) -> None:
    """The contract's event_id, entity_id and event_type are non-empty strings."""
    event = {"event_id": "e1", "entity_id": "u1", "event_type": "click", "event_time": "2026-03-01T00:00:00+00:00"}
    values = {0: event, 1: {**event, "event_id": ""}, 2: {**event, "entity_id": ""}, 3: {**event, "event_type": ""}}
    raw = kafka_rows(
        spark_session, {offset: (v["entity_id"].encode(), json.dumps(v).encode()) for offset, v in values.items()}
    )
    reasons = {row["offset"]: row["quarantine_reason"] for row in parse_records(raw, EVENTS_CONTRACT).collect()}

    assert reasons == {
        0: None,
        1: "missing_field: event_id is empty",
        2: "missing_field: entity_id is empty",
        3: "missing_field: event_type is empty",
    }


# --- The Java check against the Variant check it replaced -------------------------------------------------------
#
# Random records around the edges of the contract (bytes, JSON, roles, times, properties, keys), checked by both:
# every output column must be the same, the quarantine reason included. The Variant check is Spark SQL only
# (benchmarks/variant_contract.py), so this also holds the Java parse to what Spark's own parser and UTF-8 check say.

_TIMES = (
    "2026-03-01T00:00:00+00:00",
    "2026-03-01 10:00:00+01:00",
    "2026-03-01T10:00+0100",
    "2026-03-01T10:00:00.123456789Z",
    "2026-03-01T10:00:00",
    "2026-02-30T00:00:00Z",
    "0001-01-01T00:00:00+01:00",
    "0000-06-01T00:00:00Z",
    "9999-12-31T23:59:59-01:00",
    "9999-12-31T23:59:59Z",
    "",
    "last tuesday",
)
_VALUES: tuple[object, ...] = (None, 0, -1.5, True, [], {}, "", "x", [1, "a"], {"a": None})
_PROPERTIES = (
    '{"z": 2.50, "a": 1E2, "n": -0, "e": 1.5e1, "big": 123456789012345678901234567890123456789012, "huge": 1e400}',
    '{"nested": {"b": [1, {"c": "\\u00e9\\ud83d\\ude00"}], "a": null}, "t": true}',
    '{"d": 1, "d": 2}',
    "null",
    "[1, 2]",
    '"text"',
    "12",
    "{}",
)
_TEXT = ("", " ", "\n", "}", "{", "]", "[", ",", ":", '"', "\\", "x", "null", "1", " {} ", '"k": 1', "/*c*/", "\\u0000")
_BYTES = (b"\xff", b"\xc0\x80", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf0\x9f\x98", b"\x80", b"\0")
_BOM = b"\xef\xbb\xbf"


def _mutant(rng) -> tuple[bytes | None, bytes | None]:
    """A record near the contract's edges: a valid event, changed in up to three ways."""
    event = {
        "event_id": rng.choice(("e1", "e-\u00e9", "\u4e8b\u4ef6")),
        "entity_id": rng.choice(("u1", "\u30e6\u30fc\u30b6", "u\t1")),
        "event_type": "click",
        "event_time": rng.choice(_TIMES[:4]),
    }
    properties = rng.choice(_PROPERTIES) if rng.random() < 0.7 else None
    if rng.random() < 0.25:  # a valid record: every kind of properties and time
        text = json.dumps(event, ensure_ascii=rng.random() < 0.5)
        text = text if properties is None else text[:-1] + ', "properties": ' + properties + "}"
        return event["entity_id"].encode(), text.encode()
    for _ in range(rng.randrange(3)):
        name = rng.choice(("event_id", "entity_id", "event_type", "event_time"))
        change = rng.randrange(6)
        if change == 0:
            event.pop(name, None)
        elif change == 1:
            event[name] = rng.choice(_VALUES)
        elif change == 2 and name == "event_time":
            event[name] = rng.choice(_TIMES)
        elif change == 3 and name == "entity_id":
            event[name] = rng.choice(("a\u0000b", "x" * rng.choice((1024, 1025)), "\u00e9" * 513))
        elif change == 3:  # surrogates escaped alone or in pairs (Spark refuses the former)
            event[name] = rng.choice(("\ud800", "\udc00x", "\ud83d\ude00", "\ude00\ud83d", "a\ud83d"))
        elif change == 4:
            event[name] = rng.choice(("", " "))
    text = json.dumps(event, ensure_ascii=rng.random() < 0.5)
    if properties is not None:
        text = text[:-1] + ', "properties": ' + properties + "}"
    if rng.random() < 0.1:  # a key twice in the document
        text = text[:-1] + ', "event_type": "view"}'
    if rng.random() < 0.05:  # nesting within and past Jackson's limit of 1,000 (see the test below)
        depth = rng.choice((990, 1000, 1001))
        text = text[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}"
    if rng.random() < 0.05:  # a number around Jackson's limit of 1,000 digits
        text = text[:-1] + ', "long": ' + "9" * rng.choice((999, 1000, 1001)) + "}"
    for _ in range(rng.choice((0, 0, 0, 1, 1, 2))):  # the text itself
        at = rng.randrange(len(text) + 1)
        cut = rng.choice((0, 0, 1, 3))
        text = text[:at] + rng.choice(_TEXT) + text[at + cut :]
    if rng.random() < 0.03:  # not an object
        text = rng.choice(("[" + text + "]", "42", '"text"', "null", "true"))
    if rng.random() < 0.1:
        text = rng.choice((" \t\r\n", "\u00a0", "\ufeff")) + text + rng.choice(("", "\n", " x", "\u2028"))
    value = text.encode("utf-8", "surrogatepass")
    for _ in range(rng.choice((0, 0, 0, 0, 1))):  # its bytes
        at = rng.randrange(len(value) + 1)
        value = value[:at] + rng.choice(_BYTES) + value[at + rng.randrange(2) :]
    if rng.random() < 0.03:
        value = _BOM + value
    if rng.random() < 0.03:  # around the size limit
        value = value[:-1] + b" " * (MAX_VALUE_BYTES - len(value) + rng.choice((-1, 0, 1))) + value[-1:]
    entity = event.get("entity_id")
    entity_key = entity.encode("utf-8", "surrogatepass") if isinstance(entity, str) else b"u1"
    key: bytes | None = entity_key
    roll = rng.random()
    if roll < 0.04:
        key = None
    elif roll < 0.08:
        key = entity_key + b"\xff"
    elif roll < 0.12:
        key = b"other"
    if rng.random() < 0.01:
        return key, None
    return key, value


def _by_offset(frame) -> dict[int, dict]:  # a DataFrame of parse_records' columns
    """Its rows by offset, timestamps as text in the session's zone (UTC): Python's datetime, in the local
    zone, cannot hold 9999-12-31T23:59:59Z east of UTC (the suites run under TZ=Europe/Berlin too)."""
    from pyspark.sql import functions as F

    columns = [F.col(c).cast("string").alias(c) if t == "timestamp" else F.col(c) for c, t in frame.dtypes]
    return {row["offset"]: row.asDict() for row in frame.select(columns).collect()}


def test_the_check_says_what_the_variant_check_said_for_every_record(spark_session) -> None:
    """Same accepted records, same fields, same reason for each quarantined one, over 4,000 random records."""
    import random

    from benchmarks.variant_contract import variant_parse_records

    rng = random.Random(46)
    raw = kafka_rows(spark_session, {offset: _mutant(rng) for offset in range(4000)})
    before = _by_offset(variant_parse_records(raw))
    after = _by_offset(parse_records(raw, EVENTS_CONTRACT))

    differ = [
        (o, {c: (before[o][c], after[o][c]) for c in before[o] if c != "value" and before[o][c] != after[o][c]})
        for o in sorted(before)
        if before[o] != after[o]
    ]
    shown = [(o, changes, (before[o]["value"] or b"")[:160]) for o, changes in differ[:5]]
    assert not differ, f"{len(differ)} records differ (offset, (before, after) per column, value): {shown}"
    reasons = {row["quarantine_reason"].split(":")[0] for row in before.values() if row["quarantine_reason"]}
    accepted = sum(row["quarantine_reason"] is None for row in before.values())
    # The sample reaches every kind of reason, and accepts enough records to compare their fields.
    assert reasons == {*MALFORMED_KINDS, "null_value", "bad_entity_id", "key_mismatch"}, reasons
    assert accepted > 600, accepted


def test_a_document_is_json_exactly_when_spark_reads_it(spark_session) -> None:
    """Nesting up to Jackson's limit, and escaped surrogates only in pairs: as Spark's ``parse_json``.

    The Variant check quarantined a document nested 1,000 deep as "text after the JSON object" (its
    check for trailing text wrapped the value in one more level); the Java check reads what Spark reads.
    """
    event = '"event_id": "e1", "entity_id": "u1", "event_type": "click", "event_time": "2026-03-01T00:00:00Z"'
    texts = [
        *("{" + event + ', "deep": ' + "[" * depth + "]" * depth + "}" for depth in (998, 999, 1000)),
        *(
            "{" + event + ', "p": "' + escaped + '"}'
            for escaped in ("\\ud83d\\ude00", "\\ud800", "\\udc00", "\\\\ud800")
        ),
        "{" + event + ', "\\ud800": 1}',
    ]
    raw = kafka_rows(spark_session, {offset: (b"u1", text.encode()) for offset, text in enumerate(texts)})
    spark_reads = {
        row["offset"]: row["read"]
        for row in raw.selectExpr("offset", "try_parse_json(cast(value AS string)) IS NOT NULL AS read").collect()
    }
    reasons = {row["offset"]: row["quarantine_reason"] for row in parse_records(raw, EVENTS_CONTRACT).collect()}

    assert reasons == {offset: None if spark_reads[offset] else "invalid_json" for offset in reasons}
    assert [spark_reads[offset] for offset in sorted(spark_reads)] == [
        True,
        True,
        False,
        True,
        False,
        False,
        True,
        False,
    ]


WEB = Contract(
    schema={
        "type": "object",
        "required": ["messageId", "userId", "timestamp", "event", "context"],
        "properties": {
            "messageId": {"type": "string", "minLength": 1},
            "userId": {"type": "string"},
            "timestamp": {"type": "string", "format": "date-time"},
            "event": {"type": "string", "enum": ["page", "track"]},
            "context": {
                "type": "object",
                "required": ["user"],
                "properties": {
                    "user": {"type": "object", "properties": {"id": {"type": "string", "pattern": "^u[0-9]+$"}}}
                },
            },
            "properties": {"type": "object", "properties": {"revenue": {"type": "number", "minimum": 0}}},
        },
    },
    event_id="/messageId",
    entity_id="/context/user/id",
    event_time="/timestamp",
    event_type="/event",
    properties="/properties",
    key_is_entity_id=False,
)


def test_any_pipelines_contract_names_the_rule_and_the_place_that_failed(spark_session) -> None:
    """A Segment-style contract: roles at nested pointers, the schema's own rules, no key required."""
    good = {
        "messageId": "m1",
        "userId": "a1",
        "timestamp": "2026-03-01T00:00:00Z",
        "event": "track",
        "context": {"user": {"id": "u1"}},
        "properties": {"revenue": 12.50, "sku": "b"},
    }
    values = {
        0: good,
        1: {**good, "context": {"user": {}}},
        2: {**good, "event": "purchase"},
        3: {**good, "properties": {"revenue": -1}},
        4: {**good, "context": {"user": {"id": "x1"}}},
        5: {**good, "properties": [1]},
        6: {k: v for k, v in good.items() if k != "userId"},
        7: {**good, "userId": 7},
    }
    raw = kafka_rows(spark_session, {offset: (None, json.dumps(v).encode()) for offset, v in values.items()})
    rows = {row["offset"]: row for row in parse_records(raw, WEB).collect()}

    assert (rows[0]["event_id"], rows[0]["entity_id"], rows[0]["event_type"]) == ("m1", "u1", "track")
    assert rows[0]["properties"] == '{"revenue":12.5,"sku":"b"}'
    reasons = {offset: row["quarantine_reason"] for offset, row in rows.items()}
    assert reasons[0] is None
    assert reasons[1] == "missing_field: context/user/id"
    assert reasons[2].startswith("schema: enum at /event: ")
    assert reasons[3].startswith("schema: minimum at /properties/revenue: ")
    assert reasons[4].startswith("schema: pattern at /context/user/id: ")
    assert reasons[5] == "wrong_type: properties must be an object"
    assert reasons[6] == "missing_field: userId"
    assert reasons[7] == "wrong_type: userId must be a string"


def test_pointers_through_arrays_find_roles_and_properties(spark_session) -> None:
    """A pointer's step into an array is an index (RFC 6901): the roles and the properties are found there too."""
    contract = Contract(
        schema={"type": "object"},
        event_id="/ids/0",
        entity_id="/ids/1",
        event_time="/at",
        properties="/items/1",
        key_is_entity_id=False,
    )
    values = {
        0: '{"ids": ["e1", "u1"], "at": "2026-03-01T00:00:00Z", "items": [{"a": 1}, {"b": 2.50, "a": 1E2}, {"c": 3}]}',
        1: '{"ids": ["e2", "u1"], "at": "2026-03-01T00:00:00Z", "items": [{"a": 1}]}',
        2: '{"ids": ["e3", "u1"], "at": "2026-03-01T00:00:00Z", "items": {"1": {"d": 4}}}',
        3: '{"ids": ["e4"], "at": "2026-03-01T00:00:00Z"}',
    }
    raw = kafka_rows(spark_session, {offset: (None, value.encode()) for offset, value in values.items()})
    rows = {row["offset"]: row for row in parse_records(raw, contract).collect()}

    assert [(rows[o]["event_id"], rows[o]["entity_id"], rows[o]["properties"]) for o in (0, 1, 2)] == [
        ("e1", "u1", '{"a":100.0,"b":2.5}'),
        ("e2", "u1", None),
        ("e3", "u1", '{"d":4}'),  # a key "1" of an object
    ]
    assert rows[3]["quarantine_reason"] == "missing_field: ids/1"


def test_typed_columns_hold_the_producers_value_exactly_or_quarantine_the_record(spark_session) -> None:
    """A typed column reads the JSON text at its pointer (inside the properties or not) as its type:
    a decimal as the producer wrote it (no double on the way), a missing or null value as null, and
    a value the type cannot hold quarantines the record, naming the column."""
    from spark_jobs.pipelines import Column

    contract = Contract(
        schema={"type": "object"},
        event_id="/id",
        entity_id="/user",
        event_time="/at",
        properties="/properties",
        key_is_entity_id=False,
        columns=(
            Column("properties_revenue", "/properties/revenue", "decimal(20,2)"),
            Column("page_url", "/page/url", "string"),
            Column("quantity", "/quantity", "int"),
            Column("shipped_at", "/shipped", "timestamp"),
        ),
    )
    base = '"id": "e{n}", "user": "u1", "at": "2026-03-01T00:00:00Z"'
    values = {
        0: '{%s, "properties": {"revenue": 123456789012345678.91, "sku": "b"}, "page": {"url": "/a?b=1"},'
        ' "quantity": 3, "shipped": "2026-03-02T10:00:00+01:00"}',
        1: "{%s}",
        2: '{%s, "properties": {"revenue": null}, "page": {"url": 17}, "quantity": null}',
        3: '{%s, "properties": {"revenue": "lots"}}',
        4: '{%s, "quantity": 3000000000}',
        5: '{%s, "page": {"url": {"path": "/b"}}}',
    }
    raw = kafka_rows(spark_session, {o: (None, (v % base.format(n=o)).encode()) for o, v in values.items()})
    rows = {row["offset"]: row for row in parse_records(raw, contract).collect()}

    from decimal import Decimal

    first = rows[0]
    assert first["quarantine_reason"] is None
    assert first["properties_revenue"] == Decimal("123456789012345678.91")
    assert (first["page_url"], first["quantity"]) == ("/a?b=1", 3)
    assert first["shipped_at"] == datetime(2026, 3, 2, 9, 0, tzinfo=UTC).astimezone().replace(tzinfo=None)
    assert first["properties"] == '{"revenue":123456789012345678.91,"sku":"b"}'
    assert [rows[1][c] for c in ("properties_revenue", "page_url", "quantity", "shipped_at")] == [None] * 4
    assert rows[1]["quarantine_reason"] is None
    assert (rows[2]["quarantine_reason"], rows[2]["properties_revenue"], rows[2]["page_url"]) == (None, None, "17")
    assert rows[3]["quarantine_reason"] == (
        "wrong_type: properties/revenue does not fit the column properties_revenue (decimal(20,2))"
    )
    assert rows[3]["properties_revenue"] is None
    assert rows[4]["quarantine_reason"] == "wrong_type: quantity does not fit the column quantity (int)"
    assert (rows[5]["quarantine_reason"], rows[5]["page_url"]) == (None, '{"path":"/b"}')
