"""The pipelines file: what it declares, and one line per problem naming the file, pipeline and field."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from spark_jobs import pipelines, pipelines_check, pipelines_file
from spark_jobs.contract import SessionRules
from spark_jobs.pipelines import Column, Defaults
from spark_jobs.pipelines_check import PipelinesError
from spark_jobs.settings import PROJECT_ROOT

WEB_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["messageId", "userId", "timestamp", "event"],
    "properties": {
        "messageId": {"type": "string"},
        "userId": {"type": "string"},
        "timestamp": {"type": "string", "format": "date-time"},
        "event": {"type": "string", "enum": ["Page Viewed", "Order Completed"]},
        "properties": {
            "type": "object",
            "properties": {"revenue": {"type": "number"}, "page": {"$ref": "#/$defs/page"}},
        },
    },
    "$defs": {"page": {"type": "object", "properties": {"url": {"type": "string"}}}},
}
ORDERS_SCHEMA = {
    "type": "object",
    "required": ["order", "occurred_at", "type"],
    "properties": {
        "order": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string", "pattern": "^o-"}}},
        "occurred_at": {"type": "string", "format": "date-time"},
        "type": {"type": "string"},
    },
}


def three_pipelines() -> dict:
    """Today's events, a Segment-style web stream (schema in a file) and domain events without sessions."""
    return {
        "pipelines": [
            yaml.safe_load((PROJECT_ROOT / "pipelines.yaml").read_text())["pipelines"][0],
            {
                "name": "web",
                "topic": "web-clicks",
                "contract": {
                    "schema": "web.schema.json",
                    "event_id": "/messageId",
                    "entity_id": "/userId",
                    "event_time": "/timestamp",
                    "event_type": "/event",
                    "properties": "/properties",
                    "key_is_entity_id": False,
                    "columns": {"properties.revenue": "decimal(18,2)", "properties.page.url": "string"},
                },
                "sessions": {"gap_minutes": 20, "max_hours": 6},
                "schedule": "@hourly",
                "alerts": {"webhook": "web_team", "email": ["web@example.com"]},
            },
            {
                "name": "orders",
                "contract": {
                    "schema": ORDERS_SCHEMA,
                    "event_id": "/order/id",
                    "entity_id": "/order/id",
                    "event_time": "/occurred_at",
                    "event_type": "/type",
                },
                "sessions": "off",
                "dedupe_horizon_days": "unbounded",
                "max_offsets_per_trigger": 100000,
                "schedule": None,
            },
        ]
    }


def write(tmp_path: Path, config: dict | str) -> Path:
    (tmp_path / "web.schema.json").write_text(json.dumps(WEB_SCHEMA))
    path = tmp_path / "pipelines.yaml"
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False))
    return path


def problems(tmp_path: Path, config: dict | str) -> list[str]:
    with pytest.raises(PipelinesError) as raised:
        pipelines_file.load(write(tmp_path, config))
    assert str(raised.value) == "\n".join(raised.value.problems)
    return raised.value.problems


def test_the_shipped_file_declares_todays_events_pipeline_with_the_settings_defaults() -> None:
    defaults = Defaults(sessions=SessionRules(timedelta(minutes=7.5)), dedupe_horizon_days=3, max_offsets_per_trigger=9)
    [events] = pipelines_file.load(PROJECT_ROOT / "pipelines.yaml", defaults)
    assert (events.name, events.topic, events.schedule) == ("events", "events", "*/15 * * * *")
    contract = events.contract
    assert (contract.event_id, contract.entity_id, contract.event_time, contract.event_type) == (
        "/event_id",
        "/entity_id",
        "/event_time",
        "/event_type",
    )
    assert contract.key_is_entity_id and contract.properties == "/properties" and contract.columns == ()
    assert (events.sessions, events.dedupe_horizon_days, events.max_offsets_per_trigger) == (defaults.sessions, 3, 9)
    # What every topic is checked with until each pipeline owns its state is this contract, to the letter.
    assert contract == pipelines.EVENTS_CONTRACT and contract.digest == pipelines.EVENTS_CONTRACT.digest


def test_three_pipelines_with_their_own_contracts_rules_schedules_and_alerts(tmp_path: Path) -> None:
    events, web, orders = pipelines_file.load(write(tmp_path, three_pipelines()))
    assert [p.name for p in (events, web, orders)] == ["events", "web", "orders"]
    assert (web.topic, web.contract.schema, web.contract.key_is_entity_id) == ("web-clicks", WEB_SCHEMA, False)
    assert web.contract.columns == (
        Column("properties_revenue", "/properties/revenue", "decimal(18,2)"),
        Column("properties_page_url", "/properties/page/url", "string"),
    )
    assert web.sessions == SessionRules(timedelta(minutes=20), timedelta(hours=6))
    assert (web.schedule, web.alerts.webhook, web.alerts.email) == ("@hourly", "web_team", ("web@example.com",))
    # The topic defaults to the name; sessions can be off; the horizon unbounded; manual runs only.
    assert (orders.topic, orders.sessions, orders.dedupe_horizon_days, orders.schedule) == ("orders", None, 0.0, None)
    assert orders.max_offsets_per_trigger == 100_000 and orders.contract.entity_id == "/order/id"
    # The contract's digest follows its content, not the order of its keys.
    reordered = dict(reversed(list(ORDERS_SCHEMA.items())))
    assert (
        orders.contract.digest
        == pipelines.Contract(reordered, "/order/id", "/order/id", "/occurred_at", "/type").digest
    )
    assert orders.contract.digest != web.contract.digest


def change(path: str, value: object, delete: bool = False) -> dict:
    """:func:`three_pipelines` with the value at ``path`` ("1.contract.event_time") set or deleted."""
    config = three_pipelines()
    *parents, last = path.split(".")
    node = config["pipelines"]
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    if delete:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return config


@pytest.mark.parametrize(
    ("path", "value", "line"),
    [
        (
            "1.contract.event_time",
            "/ts",
            "pipelines.yaml: pipeline 'web': contract.event_time: '/ts' is not a property the schema declares",
        ),
        (
            "1.contract.entity_id",
            "/properties/page/url",
            "pipelines.yaml: pipeline 'web': contract.entity_id: '/properties/page/url' is not required by the "
            "schema; a record needs its entity_id",
        ),
        (
            "1.contract.event_id",
            "/properties/revenue",
            "pipelines.yaml: pipeline 'web': contract.event_id: '/properties/revenue' is declared as number; a "
            "role's value must be a string",
        ),
        (
            "2.contract.schema",
            {"type": "object", "properties": {"order": {"type": "thing"}}},
            "pipelines.yaml: pipeline 'orders': contract.schema: is not a valid JSON Schema: properties/order/type: "
            "'thing' is not a JSON Schema type: string, number, integer, boolean, object, array, null, "
            "or a list of them",
        ),
        (
            "2.contract.schema",
            {"type": "array"},
            'pipelines.yaml: pipeline \'orders\': contract.schema: must declare the value an object ("type": "object")',
        ),
        (
            "1.contract.schema",
            "missing.json",
            "pipelines.yaml: pipeline 'web': contract.schema: 'missing.json': no such file beside the pipelines file",
        ),
        (
            "1.contract.columns",
            {"properties.revenue": "money"},
            "pipelines.yaml: pipeline 'web': contract.columns.properties.revenue: 'money' is not a column type: "
            "string, boolean, int, bigint, long, double, date, timestamp or decimal(p,s) (p up to 38, s up to p)",
        ),
        (
            "1.contract.columns",
            {"properties": "string"},
            "pipelines.yaml: pipeline 'web': contract.columns.properties: 'properties' is a column every events "
            "table has; pick another field",
        ),
        (
            "1.contract.columns",
            {"value": "string"},
            "pipelines.yaml: pipeline 'web': contract.columns.value: 'value' is a name tidemark uses while writing; "
            "pick another field",
        ),
        (
            "2.name",
            "web",
            "pipelines.yaml: pipeline 'web': name: another pipeline has this name; each name is used once",
        ),
        (
            "2.topic",
            "web-clicks",
            "pipelines.yaml: pipeline 'orders': topic: 'web-clicks' is pipeline 'web''s topic already; a topic feeds "
            "one pipeline (its offsets are that pipeline's proof of coverage)",
        ),
        (
            "1.name",
            "public",
            "pipelines.yaml: pipeline 'public': name: 'public' is a schema PostgreSQL keeps for itself, and a "
            "pipeline's name names its PostgreSQL schema and its folder of the lake; choose another",
        ),
        (
            "2.name",
            "sessions",
            "pipelines.yaml: pipeline 'sessions': name: 'sessions' is a Delta table of the lake root, and a "
            "pipeline's name names its PostgreSQL schema and its folder of the lake; choose another",
        ),
        (
            "1.name",
            "Web Clicks",
            "pipelines.yaml: pipeline 'Web Clicks': name: must be lower-case letters, digits and _, starting with a "
            "letter, at most 40",
        ),
        (
            "1.sessions",
            {"gap_minutes": 90, "max_hours": 1},
            "pipelines.yaml: pipeline 'web': sessions: maximum session length 1:00:00 is shorter than the gap 1:30:00",
        ),
        (
            "1.sessions",
            {"gap_minutes": -1},
            "pipelines.yaml: pipeline 'web': sessions: must be off, or a mapping of gap_minutes and max_hours",
        ),
        (
            "1.schedule",
            "every hour",
            "pipelines.yaml: pipeline 'web': schedule: 'every hour' is not a cron expression (e.g. '*/15 * * * *') or "
            "a preset (@hourly, @daily, @weekly, @monthly, @yearly)",
        ),
        (
            "1.alerts",
            {"email": ["not an address"]},
            "pipelines.yaml: pipeline 'web': alerts.email.0: must be an e-mail address",
        ),
        (
            "1.max_offsets_per_trigger",
            -5,
            "pipelines.yaml: pipeline 'web': max_offsets_per_trigger: must be auto, or a whole number of records, 0 or "
            "more (0: no cap)",
        ),
        (
            "1.windows",
            5,
            "pipelines.yaml: pipeline 'web': unknown field 'windows' (known: alerts, contract, dedupe_horizon_days, "
            "max_offsets_per_trigger, name, schedule, sessions, topic)",
        ),
    ],
)
def test_each_problem_is_one_line_naming_the_file_the_pipeline_and_the_field(
    tmp_path: Path, path: str, value: object, line: str
) -> None:
    assert problems(tmp_path, change(path, value)) == [line]


def test_a_missing_role_and_every_problem_of_the_file_are_reported_at_once(tmp_path: Path) -> None:
    config = change("1.contract.event_id", None, delete=True)
    config["pipelines"][2]["contract"]["event_time"] = "/when"
    assert problems(tmp_path, config) == [
        "pipelines.yaml: pipeline 'web': contract: 'event_id' is missing",
        # The first problem does not hide the second pipeline's.
        "pipelines.yaml: pipeline 'orders': contract.event_time: '/when' is not a property the schema declares",
    ]


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        (
            "pipelines: [\n  - name: x\n",
            [
                "pipelines.yaml: not valid YAML at line 2, column 3: expected the node content, but found '-' "
                "(while parsing a flow node begun at line 2)"
            ],
        ),
        ("pipelines: []\n", ["pipelines.yaml: pipelines: must be a list of at least one pipeline"]),
        (
            "pipeline:\n  - name: x\n",
            ["pipelines.yaml: 'pipelines' is missing", "pipelines.yaml: unknown field 'pipeline' (known: pipelines)"],
        ),
        ("- name: x\n", ["pipelines.yaml: must be a mapping whose one field, pipelines, lists the pipelines"]),
    ],
)
def test_a_file_that_is_not_a_list_of_pipelines_says_what_it_is(tmp_path: Path, text: str, lines: list[str]) -> None:
    assert problems(tmp_path, text) == lines


def test_a_missing_file_says_which_setting_names_it(tmp_path: Path) -> None:
    with pytest.raises(PipelinesError, match="no such file; set TIDEMARK_PIPELINES to your pipelines file"):
        pipelines_file.load(tmp_path / "nowhere.yaml")


def test_a_broken_entry_is_named_in_its_problems_and_leaves_the_others_usable(tmp_path: Path) -> None:
    config = three_pipelines()
    config["pipelines"][2]["contract"]["event_time"] = "/when"  # orders: a pointer the schema lacks
    config["pipelines"].append({**config["pipelines"][1], "topic": "web-2"})  # web twice: neither is usable
    declared = pipelines_file.load_each(write(tmp_path, config))

    assert [p.name for p in declared.pipelines] == ["events"]
    assert declared.problems_of("events") == []
    assert declared.problems_of("orders") == [
        "pipelines.yaml: pipeline 'orders': contract.event_time: '/when' is not a property the schema declares"
    ]
    assert declared.problems_of("web") == [
        "pipelines.yaml: pipeline 'web': name: another pipeline has this name; each name is used once"
    ]
    # The file as a whole is still refused by load (and `tidemark pipelines check`), every problem a line.
    with pytest.raises(PipelinesError) as raised:
        pipelines_file.load(tmp_path / "pipelines.yaml")
    assert raised.value.problems == declared.lines() and len(declared.lines()) == 2


def test_the_events_pipelines_topic_is_the_setting_unless_its_entry_names_one(tmp_path: Path) -> None:
    defaults = Defaults(events_topic="clicks")
    [events] = pipelines_file.load(PROJECT_ROOT / "pipelines.yaml", defaults)
    events_, web, orders = pipelines_file.load(write(tmp_path, three_pipelines()), defaults)
    assert (events.topic, events_.topic, web.topic, orders.topic) == ("clicks", "clicks", "web-clicks", "orders")
    config = three_pipelines()
    config["pipelines"][0]["topic"] = "events-v2"
    assert pipelines_file.load(write(tmp_path, config), defaults)[0].topic == "events-v2"


def test_a_contract_change_is_compatible_unless_a_role_moves_or_a_typed_column_narrows_or_goes() -> None:
    from dataclasses import replace

    from spark_jobs.pipelines import EVENTS_CONTRACT, contract_change

    stored = replace(EVENTS_CONTRACT, columns=(Column("amount", "/properties/amount", "decimal(18,2)"),)).document()
    relaxed = {**EVENTS_CONTRACT.schema, "required": ["event_id", "entity_id", "event_time"]}
    compatible = [
        (replace(EVENTS_CONTRACT, schema=relaxed), "the schema's rules"),
        (replace(EVENTS_CONTRACT, key_is_entity_id=False), "key_is_entity_id False"),
    ]
    for contract, what in compatible:
        contract = replace(contract, columns=(Column("amount", "/properties/amount", "decimal(18,2)"),))
        assert contract_change(stored, contract).compatible and contract_change(stored, contract).describe() == what
    grown = replace(EVENTS_CONTRACT, columns=(Column("amount", "/properties/amount", "decimal(18,2)"),
                                              Column("url", "/properties/url", "string")))  # fmt: skip
    assert contract_change(stored, grown).describe() == "a typed column of '/properties/url' (string)"
    assert contract_change(stored, grown).compatible
    incompatible = [
        (replace(EVENTS_CONTRACT, entity_id="/user"), "entity_id moved from '/entity_id' to '/user'"),
        (replace(EVENTS_CONTRACT, event_type=None), "event_type moved from '/event_type' to None"),
        (EVENTS_CONTRACT, "the typed column of '/properties/amount' was dropped"),
        (replace(EVENTS_CONTRACT, columns=(Column("amount", "/properties/amount", "int"),)),
         "the typed column of '/properties/amount' changed from decimal(18,2) to int"),
    ]  # fmt: skip
    for contract, what in incompatible:
        change = contract_change(stored, contract)
        assert not change.compatible and what in change.describe(), change


def test_no_typed_column_can_take_a_name_the_writer_gives_a_batchs_rows() -> None:
    from spark_jobs.contract import WORKING_COLUMNS
    from spark_jobs.dedupe import RANK_COLUMNS

    assert set(RANK_COLUMNS) <= set(WORKING_COLUMNS)


def test_sessions_off_in_the_settings_is_the_default_an_entry_can_override() -> None:
    """TIDEMARK_SESSION_GAP_MINUTES=off: entries that say nothing cut no sessions; an entry's own
    rules fill what they leave out from the documented defaults."""
    config = {"pipelines": [{**three_pipelines()["pipelines"][0], "name": "a", "topic": "a"}]}
    plain = pipelines_check.parse(config, Path("pipelines.yaml"), Defaults(sessions=None))
    assert plain[0].sessions is None
    config["pipelines"][0]["sessions"] = {"gap_minutes": 5}
    own = pipelines_check.parse(config, Path("pipelines.yaml"), Defaults(sessions=None))
    assert own[0].sessions == SessionRules(timedelta(minutes=5), SessionRules().max_length)


@pytest.mark.parametrize(
    ("field", "value", "line"),
    [
        ("name", "web\n", "pipeline 'web\\n': name: must be lower-case letters"),
        ("name", "Web", "pipeline 'Web': name: must be lower-case letters"),
        ("name", "web ", "pipeline 'web ': name: must be lower-case letters"),
        ("name", "wеb", "pipeline 'wеb': name: must be lower-case letters"),  # a Cyrillic е
        ("topic", "web-clicks\n", "pipeline 'web': topic: must be a Kafka topic name"),
        ("alerts", {"webhook": "web_team\n"}, "pipeline 'web': alerts.webhook: must be an Airflow connection id"),
    ],
)
def test_a_name_matches_its_pattern_whole_so_no_two_names_become_one(
    tmp_path: Path, field: str, value: object, line: str
) -> None:
    """A pattern searched, as JSON Schema does, lets Python's ``$`` match before a final newline: such a name
    would pass beside the one it becomes in PostgreSQL's search path, a folder or a lock key."""
    config = three_pipelines()
    config["pipelines"][1][field] = value
    assert [p for p in problems(tmp_path, config) if line in p], problems(tmp_path, config)


def test_two_topics_kafka_cannot_tell_apart_are_one_topic_read_by_two_pipelines(tmp_path: Path) -> None:
    config = three_pipelines()
    config["pipelines"][1]["topic"] = "shop.orders"
    config["pipelines"][2]["topic"] = "shop_orders"
    assert problems(tmp_path, config) == [
        "pipelines.yaml: pipeline 'orders': topic: 'shop_orders' is pipeline 'web''s topic already (as "
        "'shop.orders': Kafka treats '.' and '_' in a name as one); a topic feeds one pipeline (its offsets are "
        "that pipeline's proof of coverage)"
    ]
    declared = pipelines_file.load_each(write(tmp_path, config))
    assert declared.readers_of("shop.orders") == declared.readers_of("shop_orders") == ("web", "orders")


def test_an_entry_that_is_not_yaml_is_its_pipelines_problem_and_the_rest_of_the_file_is_read(tmp_path: Path) -> None:
    """YAML reads a file whole; one unclosed quote in one entry must not take every pipeline's DAGs and metrics."""
    text = yaml.safe_dump(three_pipelines(), sort_keys=False)
    assert text.count("- name: orders\n") == 1
    path = write(tmp_path, text.replace("- name: orders\n", "- name: orders\n  topic: 'orders\n"))
    declared = pipelines_file.load_each(path)

    assert [p.name for p in declared.pipelines] == ["events", "web"]
    [line] = declared.problems_of("orders")
    assert line.startswith("pipelines.yaml: pipeline 'orders': not valid YAML at line ")
    assert "begun at line " in line  # where YAML began what it could not finish, in orders' entry
    assert declared.broken() == ["orders"]
    with pytest.raises(PipelinesError):  # `tidemark pipelines check` still refuses the file
        pipelines_file.load(path)


def test_an_unreadable_entry_of_a_name_another_entry_has_leaves_neither_to_run(tmp_path: Path) -> None:
    config = three_pipelines()
    config["pipelines"].append({**config["pipelines"][1], "topic": "web-2"})
    text = yaml.safe_dump(config, sort_keys=False)
    path = write(tmp_path, text.replace("topic: web-2", "topic: [web-2"))
    declared = pipelines_file.load_each(path)

    assert [p.name for p in declared.pipelines] == ["events", "orders"]
    assert declared.broken() == ["web"]


def test_an_unreadable_entry_without_a_name_is_named_by_its_line_and_names_no_pipeline(tmp_path: Path) -> None:
    text = yaml.safe_dump(three_pipelines(), sort_keys=False) + "- topic: 'x\n  contract: {}\n"
    declared = pipelines_file.load_each(write(tmp_path, text))

    assert [p.name for p in declared.pipelines] == ["events", "web", "orders"]
    [problem] = declared.problems
    assert problem.pipeline is None and problem.line.startswith("pipelines.yaml: the entry at line ")
    assert declared.broken() == []


def test_only_a_name_a_pipeline_could_have_is_kept_visible_with_its_problem(tmp_path: Path) -> None:
    config = three_pipelines()
    config["pipelines"] += [{**copy.deepcopy(config["pipelines"][1]), "name": name, "topic": f"t{i}"}
                            for i, name in enumerate(("Web", "public", "shop"))]  # fmt: skip
    config["pipelines"][-1]["contract"]["event_time"] = "/when"
    declared = pipelines_file.load_each(write(tmp_path, config))

    assert declared.broken() == ["shop"]


def test_the_file_is_read_and_checked_once_until_it_or_a_contracts_schema_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = []
    check = pipelines_file.check

    def counted_check(*args):  # the check, each call kept
        checked.append(args)
        return check(*args)

    monkeypatch.setattr(pipelines_file, "check", counted_check)
    path = write(tmp_path, three_pipelines())

    first = pipelines_file.load_each(path)
    first.pipelines.clear()  # each caller has its own copy
    again = pipelines_file.load_each(path)
    assert [p.name for p in again.pipelines] == ["events", "web", "orders"] and len(checked) == 1
    assert len(pipelines_file.load_each(path, Defaults(events_topic="clicks")).pipelines) == 3 and len(checked) == 2

    # An edit of the file is seen by the next read, and so is one of a contract's schema file beside it.
    write(tmp_path, change("2.topic", "orders-v2"))
    assert pipelines_file.load_each(path).pipelines[2].topic == "orders-v2" and len(checked) == 3
    (tmp_path / "web.schema.json").write_text(json.dumps({**WEB_SCHEMA, "required": ["messageId", "timestamp"]}))
    assert pipelines_file.load_each(path).problems_of("web") == [
        "pipelines.yaml: pipeline 'web': contract.entity_id: '/userId' is not required by the schema; a record "
        "needs its entity_id"
    ]
    (tmp_path / "web.schema.json").unlink()
    assert "no such file beside the pipelines file" in pipelines_file.load_each(path).problems_of("web")[0]
    assert len(checked) == 5
    assert pipelines_file.load_each(path).problems_of("web") and len(checked) == 5


def test_each_option_is_declared_once_and_drives_the_files_shape_its_reading_and_a_runs_settings(
    tmp_path: Path,
) -> None:
    from dataclasses import fields

    from spark_jobs.pipeline_options import options
    from spark_jobs.pipelines import Pipeline
    from spark_jobs.pipelines_schema import CONFIG_SCHEMA
    from spark_jobs.settings import Settings

    declared = [f.name for f in options(Pipeline)]
    assert declared == ["sessions", "dedupe_horizon_days", "max_offsets_per_trigger", "schedule", "alerts"]
    entry = CONFIG_SCHEMA["properties"]["pipelines"]["items"]["properties"]
    assert list(entry) == ["name", "topic", "contract", *declared]
    assert [f.name for f in fields(Defaults)] == [*declared, "events_topic"]
    # An entry that leaves every option out gets the settings' values; a run carries the pipeline's.
    settings = Settings.from_env(
        {"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_MAX_OFFSETS_PER_TRIGGER": "7", "TIDEMARK_INGEST_SCHEDULE": "@daily"}
    )
    [events] = settings.pipelines()
    assert (events.max_offsets_per_trigger, events.schedule, events.dedupe_horizon_days) == (7, "@daily", 30.0)
    _, _, orders = pipelines_file.load(write(tmp_path, three_pipelines()))
    run = settings.for_pipeline(orders)
    assert (run.session_rules, run.dedupe_horizon_days, run.max_offsets_per_trigger) == (None, 0.0, 100_000)
    assert run.ingest_schedule == "@daily", "a run's settings keep the deployment's schedule"
