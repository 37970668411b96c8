"""docker-compose.yaml and its image, checked without a Docker engine.

The file is interpolated the way Compose does (``${VAR}``, ``${VAR:-default}``, ``${VAR:?message}``,
``$$``) with dummy values for the variables ``.env.example`` lists, then validated against the
Compose specification's JSON schema (``tests/data/compose-spec.json``); Compose also validates after
interpolation. References the schema cannot see (depends_on targets, volumes, networks) and the
version pins the images must match are checked here.
"""

from __future__ import annotations

import copy
import json
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
COMPOSE_FILE = ROOT / "docker-compose.yaml"
LOCAL_FILE = ROOT / "docker-compose.local.yaml"
BUILD_IMAGES = ROOT / "docker" / "build-images.sh"
ENV_EXAMPLE = ROOT / ".env.example"
DOCKERFILE = ROOT / "docker" / "airflow" / "Dockerfile"
SCHEMA_FILE = ROOT / "tests" / "data" / "compose-spec.json"

AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
)
SPARK_SERVICES = ("spark-master", "spark-worker")
HEALTHCHECKED = ("kafka", "postgres", "schema-registry", "spark-master", "airflow-apiserver", "airflow-scheduler")
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}

# --- Compose interpolation -----------------------------------------------------------------------

_REFERENCE = re.compile(
    r"""\$(?:
        (?P<escaped>\$)
      | \{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}
      | (?P<named>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<invalid>)
    )""",
    re.VERBOSE,
)


class InterpolationError(ValueError):
    pass


def interpolate_string(text: str, env: Mapping[str, str]) -> str:
    """One string with Compose's rules: ``$$`` is a literal ``$``; ``:-``/``-`` default when unset
    (``:`` also when empty); ``:?``/``?`` fail; ``:+``/``+`` substitute when set."""

    def substitute(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        if match["invalid"] is not None:
            raise InterpolationError(f"invalid interpolation in {text!r}")
        name = match["braced"] or match["named"]
        op, arg = match["op"], match["arg"] or ""
        if "$" in arg:
            raise InterpolationError(f"nested interpolation is not supported by this check: {text!r}")
        value = env.get(name)
        unset_or_empty = not value if op and op.startswith(":") else value is None
        if op in (":-", "-"):
            return arg if unset_or_empty or value is None else value
        if op in (":?", "?"):
            if unset_or_empty or value is None:
                raise InterpolationError(f"required variable {name} is missing a value: {arg}")
            return value
        if op in (":+", "+"):
            return "" if unset_or_empty else arg
        return value or ""

    return _REFERENCE.sub(substitute, text)


def interpolate(node: Any, env: Mapping[str, str]) -> Any:
    """Interpolate every string value (not keys), as Compose does."""
    if isinstance(node, dict):
        return {key: interpolate(value, env) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate(item, env) for item in node]
    return interpolate_string(node, env) if isinstance(node, str) else node


def references(node: Any) -> set[tuple[str, str]]:
    """(variable, operator) for every ``${...}``/``$VAR`` in the values; operator "" for none."""
    if isinstance(node, dict):
        return set().union(*(references(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(references(item) for item in node))
    if not isinstance(node, str):
        return set()
    return {(m["braced"] or m["named"], m["op"] or "") for m in _REFERENCE.finditer(node) if m["braced"] or m["named"]}


# --- the files -----------------------------------------------------------------------------------


def env_example() -> dict[str, str]:
    assignments = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, sep, value = line.partition("=")
            assert sep, f".env.example: {line!r} is not NAME=value"
            assignments[name.strip()] = value
    return assignments


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    """docker-compose.yaml as written (YAML merge keys resolved, nothing interpolated)."""
    return yaml.safe_load(COMPOSE_FILE.read_text())


def dummy_values() -> dict[str, str]:
    return {name: f"dummy-{name.lower().replace('_', '-')}" for name in env_example()}


@pytest.fixture(scope="module")
def dummy_env() -> dict[str, str]:
    return dummy_values()


@pytest.fixture(scope="module")
def compose(raw: dict[str, Any], dummy_env: dict[str, str]) -> dict[str, Any]:
    """docker-compose.yaml as Compose sees it with a filled-in .env."""
    return interpolate(raw, dummy_env)


def merge(base: Any, override: Any) -> Any:
    """Compose's merge of an override file, for what docker-compose.local.yaml uses: mappings merge
    key by key, anything else (scalars, healthcheck.test) is replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        return {key: merge(base[key], value) if key in base else value for key, value in override.items()} | {
            key: value for key, value in base.items() if key not in override
        }
    return override


@pytest.fixture(scope="module")
def raw_local() -> dict[str, Any]:
    return {key: value for key, value in yaml.safe_load(LOCAL_FILE.read_text()).items() if not key.startswith("x-")}


@pytest.fixture(scope="module")
def local(raw: dict[str, Any], raw_local: dict[str, Any], dummy_env: dict[str, str]) -> dict[str, Any]:
    """docker-compose.yaml with docker-compose.local.yaml, as Compose sees them with a filled-in .env."""
    return interpolate(merge(raw, raw_local), dummy_env)


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def schema_errors(validator: jsonschema.Draft7Validator, document: dict[str, Any]) -> list[str]:
    errors = sorted(validator.iter_errors(document), key=lambda e: list(map(str, e.absolute_path)))
    messages = []
    for error in errors:
        # For oneOf/anyOf the useful message is the closest alternative's.
        detail = f" ({jsonschema.exceptions.best_match(error.context).message})" if error.context else ""
        messages.append(f"{'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}{detail}")
    return messages


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.partition("=")[::2] for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def dependencies(service: dict[str, Any]) -> dict[str, str]:
    """depends_on as {target: condition}; the list form means service_started."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {target: (spec or {}).get("condition", "service_started") for target, spec in deps.items()}


def volume_mounts(service: dict[str, Any]) -> list[tuple[str, str | None, str]]:
    """(type, source, target) for each mount; short syntax sources starting with . / ~ are binds."""
    mounts: list[tuple[str, str | None, str]] = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, str):
            parts = entry.split(":")
            if len(parts) == 1:
                mounts.append(("volume", None, parts[0]))
            else:
                kind = "bind" if parts[0].startswith((".", "/", "~")) else "volume"
                mounts.append((kind, parts[0], parts[1]))
        else:
            mounts.append((entry["type"], entry.get("source"), entry["target"]))
    return mounts


def published_ports(service: dict[str, Any]) -> list[tuple[str | None, str, str]]:
    """(host_ip, published, target) for each ports entry; host_ip None when the entry has none."""
    ports = []
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            ports.append((entry.get("host_ip"), str(entry.get("published", "")), str(entry["target"])))
            continue
        parts = str(entry).split("/")[0].split(":")  # [host_ip:][published:]target[/protocol]
        padded: list[str | None] = [*[None] * (3 - len(parts)), *parts]
        ports.append((padded[0], padded[1] or "", padded[2] or ""))
    return ports


def reference_problems(compose: dict[str, Any]) -> list[str]:
    """What Compose would reject or mis-start that the schema does not see."""
    services = compose.get("services", {})
    declared_volumes = set(compose.get("volumes") or {})
    declared_networks = set(compose.get("networks") or {}) | {"default"}
    problems = []
    for name, service in services.items():
        for target, condition in dependencies(service).items():
            if target not in services:
                problems.append(f"{name}: depends_on undefined service {target!r}")
                continue
            if condition not in CONDITIONS:
                problems.append(f"{name}: depends_on {target} with unknown condition {condition!r}")
            healthcheck = services[target].get("healthcheck") or {}
            if condition == "service_healthy" and (not healthcheck.get("test") or healthcheck.get("disable")):
                problems.append(f"{name}: waits for {target} to be healthy but {target} has no healthcheck")
        for kind, source, target in volume_mounts(service):
            if kind == "volume" and source and source not in declared_volumes:
                problems.append(f"{name}: volume {source!r} (at {target}) is not declared under volumes")
            if kind == "bind" and source and source.startswith(".") and not (COMPOSE_FILE.parent / source).exists():
                problems.append(f"{name}: bind source {source} does not exist")
        networks = service.get("networks") or {}
        for network in networks if isinstance(networks, list) else networks.keys():
            if network not in declared_networks:
                problems.append(f"{name}: network {network!r} is not declared under networks")
        if isinstance(service.get("build"), dict):
            build = service["build"]
            # The context may not exist yet (docker/build-images.sh stages the local images' context).
            path = COMPOSE_FILE.parent / build.get("context", ".") / build.get("dockerfile", "Dockerfile")
            dockerfile = Path(os.path.normpath(path))
            if not dockerfile.is_file():
                problems.append(f"{name}: build dockerfile {dockerfile} does not exist")
    # Compose refuses dependency cycles.
    visiting: set[str] = set()
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in done or name not in services:
            return
        if name in visiting:
            problems.append(f"dependency cycle: {' -> '.join([*path, name])}")
            return
        visiting.add(name)
        for target in dependencies(services[name]):
            visit(target, [*path, name])
        visiting.discard(name)
        done.add(name)

    for name in services:
        visit(name, [])
    return problems


def loopback_problems(compose: dict[str, Any]) -> list[str]:
    return [
        f"{name}: port {published}:{target} binds {host_ip or 'every interface'}, not 127.0.0.1"
        for name, service in compose["services"].items()
        for host_ip, published, target in published_ports(service)
        if host_ip != "127.0.0.1"
    ]


_SECRET_NAME = re.compile(r"(PASSWORD|SECRET|SECRET_KEY|FERNET_KEY|TOKEN)$")
# A secret inside a value must be a ${VARIABLE} too.
_SECRET_IN_VALUE = re.compile(
    r"""(?<![\w$])password["']?\s*[:=]\s*["']?([^"'\s,}]*)"""  # password=x, "password": "x"
    r"""|://[^:/@\s]+:(\$\{[^}]*\}|[^@\s/]*)@""",  # scheme://user:x@host
    re.IGNORECASE,
)


def secret_leaks(raw: dict[str, Any]) -> list[str]:
    """Environment entries of the uninterpolated file that carry a secret not taken from a variable."""
    leaks = []
    for name, service in raw["services"].items():
        for key, value in environment(service).items():
            literal_secret = _SECRET_NAME.search(key) and not value.startswith("${")
            literal_embedded = any(not (m[1] or m[2] or "").startswith("${") for m in _SECRET_IN_VALUE.finditer(value))
            if literal_secret or literal_embedded:
                leaks.append(f"{name}.{key}")
    return leaks


def pom_dependency_version(pom: Path, artifact_id: str) -> str:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.parse(pom).getroot()
    declared = root.find("m:properties", ns)
    assert declared is not None, f"{pom} has no properties"
    properties = {child.tag.split("}")[1]: child.text or "" for child in declared}
    for dependency in root.iterfind("m:dependencies/m:dependency", ns):
        if dependency.findtext("m:artifactId", namespaces=ns) == artifact_id:
            version = dependency.findtext("m:version", default="", namespaces=ns)
            return re.sub(r"\$\{([^}]+)\}", lambda m: properties[m[1]], version)
    raise AssertionError(f"{pom} has no dependency {artifact_id}")


def pom_property(pom: Path, name: str) -> str:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    value = ET.parse(pom).getroot().findtext(f"m:properties/m:{name}", namespaces=ns)
    assert value, f"{pom} has no property {name}"
    return value


def pin(path: Path, package: str) -> str:
    match = re.search(rf"^{re.escape(package)}==([^\s\\;]+)", path.read_text(), re.MULTILINE)
    assert match, f"{path.name} does not pin {package}"
    return match[1]


def dockerfile_instructions() -> list[tuple[str, ...]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines = [line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [tuple(line.strip().split(None, 1)) for line in joined.splitlines() if line.strip()]


# --- the tests -----------------------------------------------------------------------------------


def test_compose_file_validates_against_the_compose_specification(
    compose: dict[str, Any], validator: jsonschema.Draft7Validator
) -> None:
    assert compose["name"] == "tidemark"
    assert schema_errors(validator, compose) == []


@pytest.mark.parametrize(
    ("breakage", "expected"),
    [
        (lambda c: c["services"]["kafka"].update(healthckeck={"test": ["CMD", "true"]}), "healthckeck"),
        (lambda c: c["services"]["airflow-init"]["depends_on"]["postgres"].update(condition="ready"), "ready"),
        (lambda c: c["services"]["postgres"].update(ports=5432), "5432"),
    ],
    ids=["unknown-key", "unknown-condition", "ports-not-a-list"],
)
def test_the_schema_rejects_a_broken_copy(
    compose: dict[str, Any],
    validator: jsonschema.Draft7Validator,
    breakage: Callable[[dict[str, Any]], None],
    expected: str,
) -> None:
    broken = copy.deepcopy(compose)
    breakage(broken)
    errors = schema_errors(validator, broken)
    assert any(expected in error for error in errors), errors


def test_references_resolve(compose: dict[str, Any]) -> None:
    assert reference_problems(compose) == []


@pytest.mark.parametrize(
    ("breakage", "expected"),
    [
        (lambda c: c["services"]["spark-worker"]["depends_on"].update(spark={}), "undefined service 'spark'"),
        (lambda c: c["services"]["kafka"].update(volumes=["kafka-logs:/var/lib/kafka/data"]), "'kafka-logs'"),
        (lambda c: c["services"]["kafka"].update(networks=["backend"]), "'backend'"),
        (lambda c: c["services"]["spark-master"].pop("healthcheck"), "spark-master has no healthcheck"),
        (lambda c: c["services"]["postgres"].update(depends_on=["airflow-init"]), "dependency cycle"),
        (lambda c: c["services"]["postgres"].update(volumes=["./docker/postgres/missing.sh:/x"]), "does not exist"),
    ],
    ids=["undefined-service", "undeclared-volume", "undeclared-network", "no-healthcheck", "cycle", "missing-bind"],
)
def test_the_reference_check_catches_a_broken_copy(
    compose: dict[str, Any], breakage: Callable[[dict[str, Any]], None], expected: str
) -> None:
    broken = copy.deepcopy(compose)
    breakage(broken)
    problems = reference_problems(broken)
    assert any(expected in problem for problem in problems), problems


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("a$$b", {}, "a$b"),
        ("${X:-d}", {"X": ""}, "d"),
        ("${X-d}", {"X": ""}, ""),
        ("${X:+on}", {"X": "1"}, "on"),
        ("$X/${Y}", {"X": "1", "Y": "2"}, "1/2"),
    ],
)
def test_interpolation_follows_compose(text: str, env: dict[str, str], expected: str) -> None:
    assert interpolate_string(text, env) == expected


def test_a_missing_required_variable_stops_compose(raw: dict[str, Any], dummy_env: dict[str, str]) -> None:
    env = {name: value for name, value in dummy_env.items() if name != "POSTGRES_PASSWORD"}
    with pytest.raises(InterpolationError, match="POSTGRES_PASSWORD is missing a value: set POSTGRES_PASSWORD"):
        interpolate(raw, env)
    # An empty value (an unedited copy of .env.example) is missing too.
    with pytest.raises(InterpolationError, match="POSTGRES_PASSWORD"):
        interpolate(raw, {**dummy_env, "POSTGRES_PASSWORD": ""})


def test_env_example_lists_every_variable_without_a_default_and_nothing_else(raw: dict[str, Any]) -> None:
    used = references(raw)
    needed = {name for name, op in used if op in ("", ":?", "?")}
    listed = env_example()
    assert sorted(needed - listed.keys()) == []
    assert sorted(listed.keys() - {name for name, _ in used}) == []
    # Placeholders only: a real secret must never land in the example file.
    assert {name: value for name, value in listed.items() if value} == {}


def test_no_secret_is_written_into_the_compose_file(raw: dict[str, Any]) -> None:
    assert secret_leaks(raw) == []


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("POSTGRES_PASSWORD", "hunter2"),
        ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql+psycopg2://airflow:hunter2@postgres/airflow"),
        ("TIDEMARK_POSTGRES_DSN", "host=postgres user=tidemark_owner password=hunter2"),
        ("AIRFLOW_CONN_X", '{"conn_type": "postgres", "password": "hunter2"}'),
    ],
)
def test_the_secret_check_catches_a_literal_password(raw: dict[str, Any], key: str, value: str) -> None:
    broken = copy.deepcopy(raw)
    broken["services"]["postgres"]["environment"][key] = value
    assert f"postgres.{key}" in secret_leaks(broken)


def test_kafka_image_is_the_release_of_the_pinned_broker_jar(compose: dict[str, Any]) -> None:
    kafka_version = pom_dependency_version(ROOT / "jvm" / "kafka" / "pom.xml", "kafka_2.13")
    assert compose["services"]["kafka"]["image"] == f"apache/kafka:{kafka_version}"


def test_schema_registry_image_is_the_release_make_jars_unpacks(compose: dict[str, Any], local: dict[str, Any]) -> None:
    version = pom_property(ROOT / "jvm" / "registry" / "pom.xml", "apicurio.version")
    assert compose["services"]["schema-registry"]["image"] == f"apicurio/apicurio-registry:{version}"
    assert local["services"]["schema-registry"]["image"] == f"tidemark-schema-registry:{version}"


def test_schema_registry_keeps_its_schemas_in_postgres_and_checks_backward_compatibility(
    compose: dict[str, Any],
) -> None:
    """Ids in the stack's PostgreSQL (backed up with the ledger), as its own role; Confluent's default rule."""
    service = compose["services"]["schema-registry"]
    env = environment(service)
    assert (env["APICURIO_STORAGE_KIND"], env["APICURIO_STORAGE_SQL_KIND"]) == ("sql", "postgresql")
    assert env["APICURIO_DATASOURCE_URL"] == "jdbc:postgresql://postgres:5432/schema_registry"
    assert env["APICURIO_DATASOURCE_USERNAME"] == "schema_registry"
    assert env["APICURIO_RULES_GLOBAL_COMPATIBILITY"] == "BACKWARD"
    assert dependencies(service) == {"postgres": "service_healthy"}
    init = (ROOT / "docker" / "postgres" / "init.sh").read_text()
    assert "CREATE DATABASE schema_registry OWNER schema_registry;" in init
    assert "SCHEMA_REGISTRY_DB_PASSWORD" in environment(compose["services"]["postgres"])


def test_the_airflow_services_reach_the_schema_registry(compose: dict[str, Any]) -> None:
    services = compose["services"]
    url = "http://schema-registry:8080/apis/ccompat/v7"
    assert environment(services["schema-registry"])["QUARKUS_HTTP_PORT"] == "8080"
    for name in AIRFLOW_SERVICES:
        env = environment(services[name])
        assert env["TIDEMARK_SCHEMA_REGISTRY_URL"] == url, name
        assert json.loads(env["AIRFLOW_CONN_TIDEMARK_SCHEMA_REGISTRY"])["host"] == url, name
    assert dependencies(services["airflow-scheduler"])["schema-registry"] == "service_healthy"


def test_spark_cluster_runs_the_same_spark_and_python_as_the_driver(compose: dict[str, Any]) -> None:
    services = compose["services"]
    driver = services["airflow-scheduler"]
    for name in SPARK_SERVICES:
        assert (services[name]["image"], services[name]["build"]) == (driver["image"], driver["build"]), name
    # That image's Spark is the locked pyspark wheel, and the connector jars baked into it are
    # built for the same Spark release.
    pyspark = pin(ROOT / "requirements.in", "pyspark")
    assert pin(ROOT / "requirements.lock", "pyspark") == pyspark
    assert pin(ROOT / "requirements.lock", "pyspark-client") == pyspark
    assert pom_dependency_version(ROOT / "jvm" / "spark" / "pom.xml", "spark-sql-kafka-0-10_2.13") == pyspark
    # Into a virtualenv, never the system Python (Debian's python3.11 refuses --system: EXTERNALLY-MANAGED).
    # Compiled to bytecode once, in the image: its PYTHONDONTWRITEBYTECODE keeps every process from
    # writing any, so each spark-submit and task would compile every module it imports again.
    sync = "uv pip sync --no-cache --compile-bytecode --python /opt/venv/bin/python requirements.lock"
    assert ("RUN", sync) in dockerfile_instructions()
    assert not any("--system" in args for _, args in dockerfile_instructions())


def test_image_uses_python_3_11_and_the_locked_uv() -> None:
    instructions = dockerfile_instructions()
    bases = [args.split()[0] for op, args in instructions if op == "FROM"]
    assert bases and all(base.startswith("python:3.11-slim-bookworm") for base in bases), bases
    args = dict(arg.split("=", 1) for op, arg in instructions if op == "ARG" and "=" in arg)
    assert args["UV_VERSION"] == pin(ROOT / "requirements.lock", "uv")
    assert (
        "RUN",
        'python3.11 -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir "uv==${UV_VERSION}"',
    ) in instructions
    assert ("USER", "airflow") in instructions


def test_published_ports_bind_loopback_on_ports_env_may_change(raw: dict[str, Any], compose: dict[str, Any]) -> None:
    assert loopback_problems(compose) == []
    # Defaults clear of the ports the embedded stacks and tests use (x9092/x5432, 7077, 8080).
    expected = {
        "airflow-apiserver": ("127.0.0.1", "58080", "8080"),
        "spark-master": ("127.0.0.1", "58081", "8080"),
        "schema-registry": ("127.0.0.1", "58082", "8080"),
        "kafka": ("127.0.0.1", "59092", "59092"),
    }
    assert {name: published_ports(s) for name, s in compose["services"].items() if s.get("ports")} == {
        name: [port] for name, port in expected.items()
    }
    moved = interpolate(raw, dummy_values() | {"AIRFLOW_UI_HOST_PORT": "18080", "KAFKA_HOST_PORT": "19"})
    assert published_ports(moved["services"]["airflow-apiserver"]) == [("127.0.0.1", "18080", "8080")]
    assert published_ports(moved["services"]["kafka"]) == [("127.0.0.1", "19", "19")]
    # The broker listens on the published port and advertises it: clients on the host reach it.
    kafka = environment(moved["services"]["kafka"])
    assert "HOST://:19" in kafka["KAFKA_LISTENERS"] and "HOST://127.0.0.1:19" in kafka["KAFKA_ADVERTISED_LISTENERS"]


def test_the_spark_master_runs_without_its_rest_submission_server(compose: dict[str, Any]) -> None:
    assert "-Dspark.master.rest.enabled=false" in environment(compose["services"]["spark-master"])["SPARK_MASTER_OPTS"]


def test_no_healthcheck_needs_a_newer_engine_than_debian_12s(compose: dict[str, Any], local: dict[str, Any]) -> None:
    # Docker 20.10 (Debian 12's docker.io) refuses start_interval (Engine 25+).
    for document in (compose, local):
        for name, service in document["services"].items():
            assert "start_interval" not in (service.get("healthcheck") or {}), name


def test_the_loopback_check_catches_a_port_on_every_interface(compose: dict[str, Any]) -> None:
    broken = copy.deepcopy(compose)
    broken["services"]["postgres"]["ports"] = ["5432:5432"]
    assert "postgres: port 5432:5432 binds every interface, not 127.0.0.1" in loopback_problems(broken)


def test_airflow_services_share_one_image_and_the_same_connections(compose: dict[str, Any]) -> None:
    services = compose["services"]
    images = [(services[name]["image"], services[name]["build"]) for name in AIRFLOW_SERVICES]
    assert all(image == images[0] for image in images), images
    connections = [
        {key: value for key, value in environment(services[name]).items() if key.startswith("AIRFLOW_CONN_")}
        for name in AIRFLOW_SERVICES
    ]
    assert all(conns == connections[0] for conns in connections)
    assert {"AIRFLOW_CONN_SPARK_DEFAULT", "AIRFLOW_CONN_TIDEMARK_POSTGRES", "AIRFLOW_CONN_TIDEMARK_KAFKA"} <= set(
        connections[0]
    )
    for key, value in connections[0].items():
        assert isinstance(json.loads(value), dict), key


def test_airflow_environment_uses_the_agreed_names(compose: dict[str, Any]) -> None:
    env = environment(compose["services"]["airflow-scheduler"])
    expected = {
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__DAGS_FOLDER": "/opt/tidemark/dags",
        "AIRFLOW__CORE__PLUGINS_FOLDER": "/opt/tidemark/plugins",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "TIDEMARK_LAKE_ROOT": "/data/lake",
        "TIDEMARK_CHECKPOINT_ROOT": "/data/checkpoints",
        "TIDEMARK_TOPIC": "events",
        "TIDEMARK_JARS_DIR": "/opt/tidemark/jars",
    }
    assert {key: env.get(key) for key in expected} == expected
    assert int(env["AIRFLOW__CORE__PARALLELISM"]) <= 8


def test_spark_connection_reaches_the_spark_master(compose: dict[str, Any]) -> None:
    services = compose["services"]
    conn = json.loads(environment(services["airflow-scheduler"])["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert conn["conn_type"] == "spark"
    assert conn["extra"]["deploy-mode"] == "client"
    scheme, _, host = conn["host"].partition("://")
    assert (scheme, host, conn["port"]) == ("spark", "spark-master", 7077)
    master = [str(arg) for arg in services["spark-master"]["command"]]
    assert "org.apache.spark.deploy.master.Master" in master
    assert master[master.index("--host") + 1] == "spark-master"
    assert master[master.index("--port") + 1] == "7077"
    assert "spark://spark-master:7077" in services["spark-worker"]["command"]


def test_kafka_and_postgres_connections_reach_their_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    env = environment(services["airflow-scheduler"])
    kafka = json.loads(env["AIRFLOW_CONN_TIDEMARK_KAFKA"])
    assert kafka["extra"]["bootstrap.servers"] == env["TIDEMARK_KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
    advertised = environment(services["kafka"])["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert "PLAINTEXT://kafka:9092" in advertised
    postgres = json.loads(env["AIRFLOW_CONN_TIDEMARK_POSTGRES"])
    assert (postgres["host"], postgres["port"], postgres["schema"], postgres["login"]) == (
        "postgres",
        5432,
        "tidemark",
        "tidemark_pipeline",
    )
    assert "user=tidemark_pipeline" in env["TIDEMARK_POSTGRES_DSN"]
    # Migrations (DDL) run as the owner role, and only in airflow-init.
    assert "user=tidemark_owner" in environment(services["airflow-init"])["TIDEMARK_POSTGRES_DSN"]
    assert "tidemark db migrate" in " ".join(services["airflow-init"]["command"])


def test_services_others_wait_for_have_healthchecks(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in HEALTHCHECKED:
        healthcheck = services[name].get("healthcheck") or {}
        assert healthcheck.get("test") and not healthcheck.get("disable"), name
        assert healthcheck["test"][0] in ("CMD", "CMD-SHELL"), name
    for name in AIRFLOW_SERVICES[1:]:
        assert dependencies(services[name]).items() >= {
            ("postgres", "service_healthy"),
            ("airflow-init", "service_completed_successfully"),
        }, name


def test_broker_stamps_arrival_time_and_never_creates_topics_implicitly(compose: dict[str, Any]) -> None:
    env = environment(compose["services"]["kafka"])
    assert env["KAFKA_LOG_MESSAGE_TIMESTAMP_TYPE"] == "LogAppendTime"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"


def test_driver_and_executors_see_the_lake_at_the_same_path(compose: dict[str, Any]) -> None:
    services = compose["services"]
    shared = set.intersection(
        *(
            {(source, target) for kind, source, target in volume_mounts(services[name]) if kind == "volume"}
            for name in ("airflow-scheduler", *SPARK_SERVICES)
        )
    )
    env = environment(services["airflow-scheduler"])
    for root in (env["TIDEMARK_LAKE_ROOT"], env["TIDEMARK_CHECKPOINT_ROOT"]):
        assert any(root.startswith(target.rstrip("/") + "/") for _, target in shared), (root, shared)


# --- docker-compose.local.yaml: the same stack on the images `make images` builds ----------------


def test_the_local_stack_validates_and_its_references_resolve(
    local: dict[str, Any], validator: jsonschema.Draft7Validator
) -> None:
    assert schema_errors(validator, local) == []
    assert reference_problems(local) == []
    assert loopback_problems(local) == []


def test_the_local_override_changes_images_only(raw: dict[str, Any], raw_local: dict[str, Any]) -> None:
    assert set(raw_local) == {"services"}
    assert set(raw_local["services"]) == set(raw["services"])
    for name, service in raw_local["services"].items():
        # The broker jars have no kafka-topics.sh: the local Kafka keeps its healthcheck's timing only.
        allowed = {"image", "pull_policy", "build"} | ({"healthcheck"} if name == "kafka" else set())
        assert set(service) <= allowed, name
        assert service["pull_policy"] == "never", name


def test_local_images_are_the_ones_build_images_builds(local: dict[str, Any]) -> None:
    built = dict(re.findall(r"^build (\S+) (docker/local/\S+\.Dockerfile)$", BUILD_IMAGES.read_text(), re.MULTILINE))
    services = local["services"]
    kafka_version = pom_dependency_version(ROOT / "jvm" / "kafka" / "pom.xml", "kafka_2.13")
    assert services["kafka"]["image"] == f"tidemark-kafka:{kafka_version}"
    assert services["postgres"]["image"] == "tidemark-postgres:15"
    assert services["schema-registry"]["image"].startswith("tidemark-schema-registry:")
    for name in (*AIRFLOW_SERVICES, *SPARK_SERVICES):
        assert services[name]["image"] == "tidemark:offline", name
    for name, service in services.items():
        dockerfile = os.path.normpath(Path(service["build"]["context"]) / service["build"]["dockerfile"])
        assert built[service["image"]] == dockerfile, name
        assert service["build"]["context"] == ".tidemark/docker/context", name


def test_make_test_does_not_run_the_compose_test() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "\nUNIT_TESTS := not integration and not compose\n" in makefile
    assert '$(BIN)/pytest -m "$(UNIT_TESTS)" tests' in makefile.split("\ntest-unit:", 1)[1].split("\n\n", 1)[0]
    assert "-m compose" in makefile.split("\ncompose-test:", 1)[1].split("\n\n", 1)[0]
