# tidemark: `make demo` sets everything up and runs the demo; `make test` runs the tests.
# Every target installs what it needs first, so each works from a fresh clone.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
STATE := .tidemark
BIN := $(VENV)/bin
TIDEMARK := $(BIN)/tidemark
MVN := tools/mvn.sh
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: help venv jars jars-s3 up down status doctor migrate demo airflow bench bench-long test test-unit test-integration test-operations test-scenarios test-airflow test-deploy ci test-fresh fuzz fuzz-found lint lock images compose-test clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-17s %s\n", $$1, $$2}'

# What each target needs from the system (Python's venv, a JDK, Maven, the PostgreSQL server, Chromium,
# Docker) is known in one place, tools/system-packages.sh: each target's first prerequisite
# system-<target> installs what is missing (root or password-less sudo, apt-get) or stops with the command.
system-%:
	@tools/system-packages.sh $*

$(VENV)/.installed: requirements.lock pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "tidemark needs Python 3.11 (set PYTHON=python3.11)")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -x $(BIN)/uv || $(BIN)/pip install -q "$$(grep -oE '^uv==[0-9.]+' requirements.lock)"
	@# Bytecode compiled once here: a host with PYTHONDONTWRITEBYTECODE set would otherwise compile
	@# every module each spark-submit and Airflow task imports (about a second of each cold run).
	$(BIN)/uv pip sync -q --compile-bytecode --python $(BIN)/python requirements.lock
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python --no-deps -e .
	$(BIN)/python -m compileall -q spark_jobs tidemark dags plugins benchmarks
	touch $@

venv: system-venv $(VENV)/.installed  ## create .venv from requirements.lock (uv, about a minute)

$(STATE)/jars/.fetched: jvm/settings.xml jvm/spark/pom.xml jvm/kafka/pom.xml
	rm -rf $(STATE)/jars/spark $(STATE)/jars/kafka
	$(MVN) -f jvm/spark/pom.xml dependency:copy-dependencies -DoutputDirectory=$(abspath $(STATE))/jars/spark
	$(MVN) -f jvm/kafka/pom.xml dependency:copy-dependencies -DoutputDirectory=$(abspath $(STATE))/jars/kafka
	touch $@

# The contract check, compiled from jvm/contract (javac through Maven), with its runtime dependencies.
CONTRACT_SOURCES := jvm/contract/pom.xml $(wildcard jvm/contract/src/main/java/io/tidemark/contract/*.java)
$(STATE)/jars/contract/.built: jvm/settings.xml $(CONTRACT_SOURCES)
	rm -rf $(STATE)/jars/contract
	$(MVN) -f jvm/contract/pom.xml package dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(abspath $(STATE))/jars/contract
	cp $(STATE)/build/contract/tidemark-contract-*.jar $(STATE)/jars/contract/
	touch $@

# The local schema registry of Avro pipelines (Apicurio Registry, about 170 MB unpacked): the tests run it
# (tidemark/embedded/schema_registry.py; `tidemark up` will once a pipeline can read Avro: docs/design.md).
$(STATE)/jars/registry/.fetched: jvm/settings.xml jvm/registry/pom.xml
	rm -rf $(STATE)/jars/registry
	$(MVN) -f jvm/registry/pom.xml dependency:unpack -Dregistry.dir=$(abspath $(STATE))/jars/registry
	touch $@

jars: system-jars $(STATE)/jars/.fetched $(STATE)/jars/contract/.built $(STATE)/jars/registry/.fetched  ## fetch the pinned Kafka connector, Delta and Kafka broker jars and the schema registry, and build the contract check (Maven)

$(STATE)/jars/s3/.fetched: jvm/settings.xml jvm/s3/pom.xml
	rm -rf $(STATE)/jars/s3
	$(MVN) -f jvm/s3/pom.xml dependency:copy-dependencies -DoutputDirectory=$(abspath $(STATE))/jars/s3
	touch $@

jars-s3: system-jars-s3 $(STATE)/jars/s3/.fetched  ## fetch hadoop-aws and the AWS SDK bundle (about 690 MB): Delta and checkpoints on S3

up: system-up venv jars  ## start Kafka and PostgreSQL under .tidemark/
	$(TIDEMARK) up

down:  ## stop Kafka and PostgreSQL
	@if [ -x $(TIDEMARK) ]; then $(TIDEMARK) down; else echo "nothing to stop (no .venv)"; fi

status: system-status venv  ## show whether the services run
	$(TIDEMARK) status

doctor: system-doctor venv  ## check Java, jars, ports and services
	$(TIDEMARK) doctor

migrate: system-migrate up  ## apply sql/ migrations
	$(TIDEMARK) db migrate

demo: system-demo migrate  ## set up everything, produce events, run the Spark job, print a summary
	$(TIDEMARK) demo

airflow: system-airflow migrate  ## run Airflow with the tidemark DAGs on http://127.0.0.1:8080 until Ctrl-C
	$(TIDEMARK) airflow

bench: system-bench venv jars  ## benchmarks against same-run baselines (own Kafka/PostgreSQL on 32092/32432); BENCH_ARGS="--events 1000000 --stages b2,p1"
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

bench-long: system-bench-long venv jars  ## the long benchmarks: 1M events (B2, PEER, P1), P1 at 100k for the CPU slope, a batch's fixed seconds, the soak (500 runs of 2,000 events, maintenance every 100), the catch-up (4M events in 16 batches), G1 against ParallelGC in cold runs by size, about two and a half hours
	$(BIN)/python -m benchmarks --events 1000000 --stages b2,peer,p1,slope,batchcost,soak,catchup,collector $(BENCH_ARGS)

test: system-test lint test-unit test-integration  ## all checks: lint, unit tests, integration tests

lint: system-lint venv  ## ruff (the rules of pyproject.toml, and the formatting), then mypy (the whole tree, as pyproject.toml says)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Each suite is a selection by the markers pyproject.toml declares (`make ci` runs the suites by their targets).
UNIT_TESTS := not integration and not compose
INTEGRATION_TESTS := integration and not operations and not airflow and not deploy and not scenario
OPERATIONS_TESTS := operations and not airflow and not deploy and not scenario
AIRFLOW_TESTS := airflow
DEPLOY_TESTS := deploy

test-unit: system-test-unit venv jars  ## unit tests (no services; the DataFrame tests start a local Spark)
	$(BIN)/pytest -m "$(UNIT_TESTS)" tests

# The integration tests run under a time zone with a daylight-saving change: the driver's (and
# PostgreSQL's and Airflow's) local time must never leak into a timestamp, and under UTC a leak
# cannot show. Europe/Berlin's clock went back on 2026-10-25, inside the model test's scenarios.
test-integration: system-test-integration venv jars  ## integration tests against real Kafka, PostgreSQL, Spark, Delta and Airflow, under TZ=Europe/Berlin
	TZ=Europe/Berlin $(BIN)/pytest -m "$(INTEGRATION_TESTS)" --durations=15 tests

# What an operator does after the pipeline runs (marker `operations`): retention and its losses,
# readmit, maintenance, reconcile and its repairs, the CLI's output. About 24 minutes on 2 cores; CI runs it.
test-operations: system-test-operations venv jars  ## the operations stories (retention, readmit, maintenance, reconcile and repairs, the CLI), under TZ=Europe/Berlin
	TZ=Europe/Berlin $(BIN)/pytest -m "$(OPERATIONS_TESTS)" --durations=15 tests

# The long end-to-end stories, several minutes each on 2 cores: the model test's fixed seeds and the
# demo. About 13 minutes; not in CI: every issue runs it before it is resolved (README, Tests).
test-scenarios: system-test-scenarios venv jars  ## the long end-to-end scenarios (the model's fixed seeds, the demo), under TZ=Europe/Berlin
	TZ=Europe/Berlin $(BIN)/pytest -m "scenario and not airflow and not deploy" --durations=10 tests

# Airflow itself: the DAGs end to end with dag.test() (spark-submit through the operator, alerts,
# the repair loop), and the UI in a headless Chromium (the trigger form, the tidemark page, Airflow's
# own backfill). About 20 minutes; CI runs it after the integration tests (`make ci`).
test-airflow: system-test-airflow venv jars  ## the DAGs through Airflow (dag.test) and the Airflow UI in a browser, under TZ=Europe/Berlin
	TZ=Europe/Berlin $(BIN)/pytest -m "$(AIRFLOW_TESTS)" --durations=10 tests

# The distributed shape, on this machine: the ingest DAG on a Spark standalone cluster, the lake and
# checkpoints on S3 (a local S3 server), Kafka with SASL/SCRAM. About 4 minutes; CI runs it last in its second lane (`make ci`).
test-deploy: system-test-deploy venv jars jars-s3  ## integration tests of the distributed shape: standalone cluster, S3, SASL Kafka
	TZ=Europe/Berlin $(BIN)/pytest -m "$(DEPLOY_TESTS)" --durations=5 tests

# CI (.ci/run): every suite but the scenarios, in two lanes at once. Most of the suites' CPU is Spark's JVMs,
# so on 2 cores two lanes gain less than two machines would; CI keeps each lane's and test's time
# (~/.local/state/tidemark) to balance them by. Lint first (a fault found in seconds);
# then the integration tests and Airflow's in one lane, the unit, operations and deploy tests in the other,
# each lane on services and state of its own (the second's ports and folders below; the tests' defaults,
# tests/conftest.py, are the first's).
# tools/lanes.sh prefixes each line with its lane and keeps each lane's output in .tidemark/ci.
LANE2 := TIDEMARK_TEST_HOME=$(CURDIR)/$(STATE)/test-lane2 AIRFLOW_HOME=$(CURDIR)/$(STATE)/test-lane2/airflow \
	TIDEMARK_TEST_KAFKA_PORT=31092 TIDEMARK_TEST_KAFKA_CONTROLLER_PORT=31093 \
	TIDEMARK_TEST_POSTGRES_PORT=31432 TIDEMARK_TEST_SCHEMA_REGISTRY_PORT=31081
ci: system-ci lint venv jars jars-s3  ## what CI runs: lint, then test-integration and test-airflow beside test-unit, test-operations and test-deploy (two lanes)
	tools/lanes.sh "$(MAKE) test-integration test-airflow" "$(LANE2) $(MAKE) test-unit test-operations test-deploy"

fuzz: system-fuzz venv jars  ## model-based test: SEEDS=N random scenarios (default 20) from seed FROM (default 1000), or SEED=S to replay one
	TZ=Europe/Berlin TIDEMARK_FUZZ_SEEDS=$(or $(SEEDS),20) TIDEMARK_FUZZ_FROM=$(FROM) TIDEMARK_FUZZ_SEED=$(SEED) \
		$(BIN)/pytest -m integration \
		tests/integration/spark_jobs/test_model.py $(FUZZ_ARGS)

fuzz-found: system-fuzz-found venv jars  ## the model test's seeds that found a fault an example test now covers (FOUND_SEEDS; about 15 minutes)
	TZ=Europe/Berlin TIDEMARK_FUZZ_FOUND=1 $(BIN)/pytest -m integration \
		tests/integration/spark_jobs/test_model.py $(FUZZ_ARGS)

images: system-images venv jars  ## build the compose stack's images offline: Debian base (mmdebstrap), wheelhouse, jars (root; about 6 min)
	docker/engine.sh start
	PY=$(abspath $(BIN))/python docker/build-images.sh

# Not part of `make test` nor of CI: it needs root (or a running Docker engine) and takes about 8 minutes
# on built images, 25 from a fresh machine. Every issue touching deployment, configuration or the
# image runs it before it is resolved (README, Tests).
compose-test: system-compose-test venv jars  ## the compose stack end to end on the local images (tests/compose); stops a dockerd it started
	docker/engine.sh start && \
	PY=$(abspath $(BIN))/python docker/build-images.sh \
		&& COMPOSE_BAKE=false $(BIN)/pytest -m compose -p no:cacheprovider --durations=10 tests/compose; \
	status=$$?; docker/engine.sh stop; exit $$status

# `make demo` then `make test` on a machine with nothing but Debian 12's minimal system and make: a
# container of a root filesystem mmdebstrap makes, on the host's network (docker/fresh-machine.sh). It
# shows that the two commands install what they need. Root; about 45 minutes; not in CI.
test-fresh: system-test-fresh  ## `make demo` and `make test` in a fresh Debian 12 container, as a new machine runs them (root; about 45 min)
	docker/engine.sh start && docker/fresh-machine.sh; \
	status=$$?; docker/engine.sh stop; exit $$status

lock: system-lock  ## re-resolve requirements.lock from requirements.in
	$(BIN)/uv pip compile -q --generate-hashes --python-version 3.11 requirements.in -o requirements.lock

clean: down  ## stop services and delete .venv and .tidemark (data included)
	rm -rf $(VENV) $(STATE)
