"""The benchmark's pure logic: medians, ratios against targets, the table and the JSON document."""

from __future__ import annotations

import argparse
import json

import pytest

from benchmarks.checks import Check, Target, build_checks
from benchmarks.figures import Measurement, median, per_second, throughput_ratio
from benchmarks.options import (
    STAGES,
    BenchOptions,
    add_arguments,
    bench_settings,
    options_from_arguments,
    parse_stages,
)
from benchmarks.report import format_table, results_document
from benchmarks.workloads import changed_rows, submit_env
from spark_jobs.settings import Settings


def measured(key: str, count: int, *seconds: float, unit: str = "events", **details) -> Measurement:
    m = Measurement(key, f"stage {key}", count, unit, details=dict(details))
    for s in seconds:
        m.add(s, cpu_client=s, cpu_services=0.5)
    return m


def test_median_and_rates() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0]) == 2.5
    assert median([]) is None
    assert per_second(1000, 2.0) == 500.0
    assert per_second(0, 2.0) is None and per_second(10, 0.0) is None and per_second(10, None) is None
    assert throughput_ratio(250.0, 500.0) == 0.5
    assert throughput_ratio(None, 1.0) is None and throughput_ratio(1.0, 0.0) is None


def test_measurement_uses_medians_for_time_rate_and_cpu() -> None:
    m = measured("P1", 100_000, 12.0, 10.0, 50.0)
    assert m.median_seconds == 12.0
    assert m.rate == pytest.approx(100_000 / 12.0)
    assert m.cpu_seconds == [12.5, 10.5, 50.5]
    assert m.cpu_seconds_per_million == pytest.approx(12.5 * 10)
    doc = m.to_json()
    assert doc["events"] == 100_000 and doc["seconds_median"] == 12.0 and doc["repetitions"] == 3
    assert doc["cpu_seconds_per_million_events"] == 125.0
    assert measured("E0", 0, 3.0).cpu_seconds_per_million is None


@pytest.mark.parametrize(
    ("target", "value", "met"),
    [
        (Target(">=", 0.5), 0.5, True),
        (Target(">=", 0.5), 0.49, False),
        (Target("<=", 1.3), 1.31, False),
        (Target("<=", 1.3), 0.9, True),
        (Target("==", 0), 0, True),
        (Target("==", 0), 2, False),
    ],
)
def test_targets(target: Target, value: float, met: bool) -> None:
    assert target.met(value) is met


def test_a_target_needs_a_known_operator() -> None:
    with pytest.raises(ValueError, match="operator"):
        Target(">", 1)


def test_checks_are_throughput_ratios_for_rates_and_time_ratios_for_growth_and_empty_runs() -> None:
    ms = {
        m.key: m
        for m in (
            measured("B2", 100_000, 10.0),
            measured("P1", 100_000, 25.0),  # 4,000/s vs 10,000/s: 0.4
            measured("B3", 10_000, 0.1, unit="rows"),
            measured("P2c", 10_000, 0.2, unit="rows"),  # 0.5
            measured("P2u", 10_000, 0.5, unit="rows"),  # 0.2
            measured("G1", 10_000, 20.0),
            measured("G10", 10_000, 24.0),  # 1.2
            measured("E0", 0, 10.0),
            measured("E1", 0, 16.0),  # 1.6
            measured("E0A", 0, 8.0),
            measured("E2", 2_000, 17.0),  # 7 s beyond E0, 9 beyond E0A
            measured("PEER", 100_000, 35.0),  # P1 at 1.4x PEER's rate
            measured("R", 100_000, 5.0, delta_files_rewritten=0, postgres_rows_changed=3),
        )
    }
    checks = {c.key: c for c in build_checks(ms)}
    assert checks["P1/B2"].value == pytest.approx(0.4) and checks["P1/B2"].result == "PASS"  # >= 0.35 at 100k
    assert checks["P2c/B3"].value == pytest.approx(0.5) and checks["P2c/B3"].result == "PASS"
    assert checks["P2u/B3"].value == pytest.approx(0.2) and checks["P2u/B3"].result == "FAIL"
    assert checks["G10/G1"].value == pytest.approx(1.2) and checks["G10/G1"].result == "PASS"
    assert checks["E1/E0"].value == pytest.approx(1.6) and checks["E1/E0"].result == "FAIL"
    assert checks["E2-E0"].value == pytest.approx(7.0) and checks["E2-E0"].result == "FAIL"
    assert checks["E2-E0A"].value == pytest.approx(9.0) and checks["E2-E0A"].result == "info"
    assert checks["P1/PEER"].value == pytest.approx(1.4) and checks["P1/PEER"].result == "FAIL"  # >= 1.5
    assert checks["R/P1"].value == pytest.approx(0.2) and checks["R/P1"].result == "info"
    assert checks["files"].result == "PASS" and checks["rows"].result == "FAIL"
    assert "P2r/B3" not in checks and "P1/B2L" not in checks  # not measured, not reported


def test_full_ingest_is_held_to_half_of_raw_spark_at_a_million_events() -> None:
    ms = {m.key: m for m in (measured("B2", 1_000_000, 10.0), measured("P1", 1_000_000, 25.0))}
    check = {c.key: c for c in build_checks(ms)}["P1/B2"]
    assert check.value == pytest.approx(0.4) and check.result == "FAIL" and str(check.target) == ">= 0.5"


def test_hot_key_checks_hold_growth_and_spread_to_their_targets() -> None:
    ms = {
        "H1": measured("H1", 500_000, 4.0),
        "H2": measured("H2", 1_000_000, 10.0),
        "HS": measured("HS", 1_000_000, 3.0),
    }
    checks = {c.key: c for c in build_checks(ms)}
    assert checks["H2/H1"].value == pytest.approx(2.5) and checks["H2/H1"].result == "FAIL"
    assert checks["H2/HS"].value == pytest.approx(10 / 3) and checks["H2/HS"].result == "FAIL"
    ms["H2"] = measured("H2", 1_000_000, 8.0)
    checks = {c.key: c for c in build_checks(ms)}
    assert checks["H2/H1"].result == "PASS" and checks["H2/HS"].result == "PASS"


def test_cpu_per_million_events_is_the_slope_between_two_sizes_and_a_cold_run_is_held_to_spark_start() -> None:
    # measured() adds 0.5 CPU-s of services to each repetition's seconds.
    ms = {
        "P1": measured("P1", 1_000_000, 50.0, 60.0, 55.0),  # CPU median 55.5
        "P1S": measured("P1S", 100_000, 10.0),  # CPU 10.5: the fixed cost weighs in at one size
        "E0": measured("E0", 0, 9.0),
        "E2": measured("E2", 2_000, 16.0),
    }
    checks = {c.key: c for c in build_checks(ms)}
    assert checks["P1 CPU-s/M"].value == pytest.approx(50.0) and checks["P1 CPU-s/M"].result == "PASS"
    assert checks["E2-E0"].value == pytest.approx(7.0) and checks["E2-E0"].result == "FAIL"
    ms["P1S"] = measured("P1S", 1_000_000, 10.0)  # the same size twice: no slope
    assert {c.key: c for c in build_checks(ms)}["P1 CPU-s/M"].value is None


def test_warm_up_repetitions_are_zero_or_more_and_slope_events_positive() -> None:
    assert BenchOptions(warmup=0).warmup == 0
    with pytest.raises(ValueError, match="warmup"):
        BenchOptions(warmup=-1)
    with pytest.raises(ValueError, match="slope_events"):
        BenchOptions(slope_events=0)


def test_only_measured_stages_give_checks() -> None:
    assert build_checks({"P1": measured("P1", 1_000_000, 100.0)}) == []


def test_table_puts_checks_beside_their_stage() -> None:
    ms = [measured("B2", 100_000, 10.0), measured("P1", 100_000, 25.0), measured("B3", 5_000, 0.05, unit="rows")]
    checks = [
        Check("P1/B2", "P1", "ratio", 0.4, Target(">=", 0.5)),
        Check("P1/B1", "P1", "ratio", 0.01),
        Check("files", "P1", "count", 0, Target("==", 0), integer=True),
    ]
    lines = format_table(ms, checks).splitlines()
    assert lines[0].split() == ["stage", "events", "s", "(median)", "events/s", "ratio", "target", "result"]
    p1 = next(line for line in lines if line.startswith("P1 "))
    assert "100,000" in p1 and "25.00" in p1 and "4,000" in p1 and "P1/B2 0.40" in p1 and p1.endswith("FAIL")
    assert any("P1/B1 0.01" in line and line.endswith("info") for line in lines)
    assert any("files 0" in line and line.endswith("PASS") for line in lines)
    assert any(line.startswith("B3 ") and "5,000 rows" in line and "100,000" in line for line in lines)
    assert len({len(line) for line in lines[:2]}) == 1  # header and rule line up


def test_results_document_is_json_with_summary() -> None:
    ms = [measured("B2", 100, 1.0), measured("P1", 100, 4.0)]
    checks = build_checks({m.key: m for m in ms})
    doc = results_document({"machine": {"cpu_count": 2}}, ms, checks)
    again = json.loads(json.dumps(doc))
    assert again["machine"]["cpu_count"] == 2
    assert again["stages"]["P1"]["events_per_second"] == 25.0
    assert again["checks"][0] == {
        "check": "P1/B2",
        "description": "full ingest vs AvailableNow raw append, events/s",
        "value": 0.25,
        "target": ">= 0.35",
        "result": "FAIL",
    }
    assert again["summary"] == {"passed": 0, "failed": 1, "failed_checks": ["P1/B2"]}


def test_stage_selection() -> None:
    assert parse_stages("all") == STAGES
    assert parse_stages("p1, b2") == ("b2", "p1")  # run order, not the order given
    with pytest.raises(argparse.ArgumentTypeError, match="unknown stage"):
        parse_stages("p1,p9")


def test_changed_rows_change_every_tenth_session_by_one_event() -> None:
    rows = [(f"s{i}", "e", "t0", "t1", "t0", "t1", 3, 60.0) for i in range(20)]
    changed = changed_rows(rows, 0.10)
    differing = [i for i, (a, b) in enumerate(zip(rows, changed, strict=True)) if a != b]
    assert differing == [0, 10]
    assert changed[10][6] == "4" and changed[10][:6] == rows[10][:6]


def test_flags_and_bench_settings_never_use_the_demo_or_test_ports(tmp_path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = options_from_arguments(
        parser.parse_args(["--events", "1_000_000", "--stages", "p1", "--home", str(tmp_path)])
    )
    assert options.events == 1_000_000 and options.stages == ("p1",) and options.repeat == 3
    assert options.pg_repeat == 5
    env = {
        "TIDEMARK_KAFKA_PORT": "19092",
        "TIDEMARK_POSTGRES_PORT": "15432",
        "TIDEMARK_POSTGRES_DSN": "host=db dbname=tidemark",
        "TIDEMARK_LAKE_ROOT": "s3a://lake",
        "TIDEMARK_JARS_DIR": "/jars",
        "TIDEMARK_SPARK_MASTER": "local[1]",
        "TIDEMARK_SHUFFLE_PARTITIONS": "2",
    }
    settings = bench_settings(options, env)
    assert (settings.kafka_port, settings.kafka_controller_port, settings.postgres_port) == (32092, 32093, 32432)
    assert settings.home == tmp_path.resolve()
    assert settings.bootstrap_servers == "127.0.0.1:32092" and "port=32432" in settings.postgres_dsn
    assert settings.lake_root == str(tmp_path.resolve() / "lake")
    # shared with the user's setup: the jar cache and the Spark tuning
    assert str(settings.jars_dir) == "/jars"
    assert (settings.spark_master, settings.shuffle_partitions) == ("local[1]", 2)
    with pytest.raises(ValueError, match="repeat"):
        BenchOptions(repeat=0)


def test_a_spark_submitted_job_gets_exactly_the_sink_settings(tmp_path) -> None:
    settings = Settings(home=tmp_path, topic="bench-main", lake_root=str(tmp_path / "lake"), shuffle_partitions=2)
    base = {"PATH": "/usr/bin", "TIDEMARK_TOPIC": "events", "TIDEMARK_KAFKA_OPT_SASL_MECHANISM": "PLAIN", "HOME": "/h"}
    env = submit_env(settings, base)
    assert Settings.from_env(env) == settings  # nothing of this process's own TIDEMARK_* leaks in
    assert env["HOME"] == "/h" and env["PATH"].endswith("/usr/bin") and env["PATH"] != "/usr/bin"


def test_reconcile_checks_hold_its_growth_and_the_lake_lock_to_their_targets() -> None:
    ms = {"RC1": measured("RC1", 10_000, 10.0), "RC10": measured("RC10", 10_000, 14.0)}
    ms["RC1"].details["lock_seconds"] = [0.2, 0.3]
    ms["RC10"].details["lock_seconds"] = [0.4, 6.0]
    checks = {c.key: c for c in build_checks(ms)}
    assert checks["RC10/RC1"].value == pytest.approx(1.4) and checks["RC10/RC1"].result == "FAIL"
    assert checks["RC lock"].value == pytest.approx(6.0) and checks["RC lock"].result == "FAIL"
    ms["RC10"].details["lock_seconds"] = [0.4]
    assert {c.key: c for c in build_checks(ms)}["RC lock"].result == "PASS"


def test_the_contract_check_is_held_to_the_cpu_of_the_check_it_replaced_and_to_no_difference() -> None:
    ms = {
        "C0": measured("C0", 200_000, 4.0, 5.0, 6.0, unit="records"),
        "C1": measured("C1", 200_000, 2.0, 1.0, 3.0, unit="records", records_classified_differently=0),
    }
    checks = {c.key: c for c in build_checks(ms)}
    assert checks["C1/C0"].value == pytest.approx(0.4) and checks["C1/C0"].result == "PASS"  # client CPU
    assert checks["C differ"].value == 0 and checks["C differ"].result == "PASS"
    ms["C1"].details["records_classified_differently"] = 3
    assert {c.key: c for c in build_checks(ms)}["C differ"].result == "FAIL"


def test_the_floor_of_a_batch_is_held_to_the_redesign_s_twelve_executions() -> None:
    floor = {"DF": measured("DF", 21, 30.0, unit="executions")}
    check = {c.key: c for c in build_checks(floor)}["DF"]
    assert (check.value, check.result, check.formatted_value()) == (21, "FAIL", "DF 21")
    assert {c.key: c for c in build_checks({"DF": measured("DF", 12, 30.0, unit="executions")})}["DF"].result == "PASS"
