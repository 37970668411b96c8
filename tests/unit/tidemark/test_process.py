"""The process helpers of the embedded services (tidemark/embedded/process.py), on real processes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tidemark.embedded.process import read_pid, stop_pid

# A process whose child has exited and is not reaped yet: the child stays a zombie of its parent, as
# `tidemark airflow` does under a parent that waits for it only later (a test's Popen, a supervisor).
PARENT_OF_A_ZOMBIE = (
    "import subprocess, time\nchild = subprocess.Popen(['true'])\nprint(child.pid, flush=True)\ntime.sleep(60)\n"
)


def zombie() -> tuple[subprocess.Popen, int]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT_OF_A_ZOMBIE], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child did not exit"
        time.sleep(0.05)
    return parent, pid


def test_stopping_a_process_that_exited_under_a_parent_that_has_not_reaped_it_returns_at_once(tmp_path: Path) -> None:
    parent, pid = zombie()
    try:
        started = time.monotonic()
        stop_pid(pid, timeout=20)
        assert time.monotonic() - started < 5, "waited for a process that had exited"
        pid_file = tmp_path / "child.pid"
        pid_file.write_text(f"{pid}\n")
        assert read_pid(pid_file) is None, "an exited process is not running"
    finally:
        parent.kill()
        parent.wait()


def test_stopping_a_running_process_ends_it_and_reaps_it_when_it_is_a_child() -> None:
    process = subprocess.Popen(["sleep", "60"])
    started = time.monotonic()
    stop_pid(process.pid, timeout=20)
    assert time.monotonic() - started < 5
    assert not Path(f"/proc/{process.pid}").exists(), "stopped and reaped"
