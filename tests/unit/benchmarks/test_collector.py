"""The collector stage's pure parts: its sizes flag, the driver option it swaps, its figures."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmarks.checks import build_checks
from benchmarks.figures import Measurement
from benchmarks.options import add_arguments, options_from_arguments
from benchmarks.workloads import with_collector
from spark_jobs.settings import Settings
from spark_jobs.spark import THROUGHPUT_COLLECTOR, driver_conf


def parsed(args: list[str], tmp_path: Path) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args([*args, "--home", str(tmp_path)])


def test_the_sizes_flag_takes_a_comma_separated_list(tmp_path: Path) -> None:
    options = options_from_arguments(parsed(["--stages", "collector", "--gc-sizes", "100_000, 2000000"], tmp_path))
    assert options.gc_sizes == (100_000, 2_000_000)
    assert options_from_arguments(parsed(["--stages", "collector"], tmp_path)).gc_sizes == (100_000, 300_000, 1_000_000)


@pytest.mark.parametrize("sizes", ["0", "100000,-5", "lots", "100000,,200000", ""])
def test_sizes_that_are_not_positive_whole_numbers_are_refused_by_the_flag(
    sizes: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parsed(["--gc-sizes", sizes], tmp_path)
    assert "--gc-sizes" in capsys.readouterr().err


def test_the_forced_collector_replaces_the_one_tidemark_picked_and_keeps_every_other_option(tmp_path: Path) -> None:
    settings = Settings.from_env({"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_CLASS_ARCHIVE": "false"})
    picked = driver_conf(settings, "local[2]", records=1_000_000)
    assert THROUGHPUT_COLLECTOR in picked["spark.driver.extraJavaOptions"]
    forced = dict(with_collector(picked, "-XX:+UseG1GC"))
    java = forced["spark.driver.extraJavaOptions"].split()
    assert "-XX:+UseG1GC" in java and THROUGHPUT_COLLECTOR not in java
    assert java[:-1] == [o for o in picked["spark.driver.extraJavaOptions"].split() if o != THROUGHPUT_COLLECTOR]
    assert {k: v for k, v in forced.items() if k != "spark.driver.extraJavaOptions"} == {
        k: v for k, v in picked.items() if k != "spark.driver.extraJavaOptions"
    }
    assert dict(with_collector(picked, None)) == picked


def measured(key: str, seconds: list[float], cpu: list[float]) -> Measurement:
    m = Measurement(key, key, 100_000)
    m.seconds, m.cpu_seconds = seconds, cpu
    return m


def test_the_figures_are_parallels_medians_over_g1s_per_size() -> None:
    checks = {
        c.key: c.value
        for c in build_checks(
            {
                "GC G1 100,000": measured("GC G1 100,000", [30.0, 20.0, 40.0], [50.0, 60.0, 40.0]),
                "GC PAR 100,000": measured("GC PAR 100,000", [27.0, 25.0, 99.0], [45.0, 30.0, 90.0]),
                "GC PAR 300,000": measured("GC PAR 300,000", [50.0], [80.0]),  # no G1 row: no figure
            }
        )
    }
    assert checks == {"PAR/G1 100,000": pytest.approx(27.0 / 30.0), "CPU PAR/G1 100,000": pytest.approx(45.0 / 50.0)}
