"""``make airflow`` in one terminal, ``make down`` in another: Airflow stops as it would on Ctrl-C.

The installed ``tidemark airflow`` runs the four components in the foreground; ``tidemark down`` asks
it to stop them (it ends with status 0, saying what it stopped) rather than killing them under it
(which it took for a crash: "an Airflow component exited", status 1, and make's "Error 1").
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from spark_jobs.settings import Settings
from tests.integration.tidemark.test_errors import TIDEMARK, environment
from tests.ports import free_port

pytestmark = pytest.mark.airflow


def test_tidemark_down_stops_a_foreground_airflow_which_ends_as_on_ctrl_c(stack: Settings, tmp_path: Path) -> None:
    # Its own home: `tidemark down` there stops this Airflow, and no Kafka or PostgreSQL of the tests.
    env = environment(
        {k: v for k, v in stack.to_env().items() if k.endswith(("_PORT", "_DSN", "_SERVERS"))}, tmp_path / "home"
    )
    port = free_port()
    log = tmp_path / "airflow.out"
    with log.open("w") as out:
        foreground = subprocess.Popen([TIDEMARK, "airflow", "--port", str(port)], env=env, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 300
        while "Airflow is ready" not in log.read_text() and foreground.poll() is None and time.monotonic() < deadline:
            time.sleep(2)
        assert "Airflow is ready" in log.read_text(), log.read_text()[-3000:]

        down = subprocess.run([TIDEMARK, "down"], env=env, capture_output=True, text=True, timeout=300)
        assert down.returncode == 0, down.stdout + down.stderr
        assert "Airflow stopped (scheduler" in down.stdout, down.stdout
        assert foreground.wait(timeout=60) == 0, log.read_text()[-3000:]
    finally:
        if foreground.poll() is None:
            foreground.terminate()
            foreground.wait(timeout=120)
    said = log.read_text()
    assert "an Airflow component exited" not in said, said[-3000:]
    assert "stopping Airflow: scheduler" in said, said[-3000:]
