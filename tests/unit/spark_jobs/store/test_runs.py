"""A failed run's one line (``ingest_runs.failure``)."""

from __future__ import annotations

from spark_jobs.errors import WriterBusy
from spark_jobs.store.runs import failure_line


def test_a_failure_the_user_can_fix_is_its_own_message() -> None:
    assert failure_line(WriterBusy("another run holds the lock; wait")) == "another run holds the lock; wait"


def test_a_bug_is_its_type_and_first_line_without_secrets_and_at_most_500_characters() -> None:
    assert failure_line(RuntimeError("it broke\n  at somewhere")) == "RuntimeError: it broke"
    assert failure_line(KeyError()) == "KeyError"
    leaked = failure_line(ValueError("postgresql://tidemark:hunter2@db/tidemark refused"))
    assert "hunter2" not in leaked and leaked.startswith("ValueError: postgresql://tidemark:")
    long = failure_line(RuntimeError("x" * 2000))
    assert len(long) == 500 and long.endswith("…")
