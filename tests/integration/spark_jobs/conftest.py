"""Fixtures of the pipeline's integration tests."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from spark_jobs.settings import Settings


@pytest.fixture
def run(stack: Settings, topic: str):
    """Settings with this test's own lake and checkpoints, plus its topic and entity prefix."""
    prefix = f"t{uuid.uuid4().hex[:8]}-"
    home = stack.home / "runs" / prefix.rstrip("-")
    settings = replace(stack, lake_root=str(home / "lake"), checkpoint_root=str(home / "checkpoints"), topic=topic)
    return settings, prefix


@pytest.fixture
def fresh(spark, database, topic):
    """Settings with this test's own database, lake, checkpoints and topic (for checks of a whole ledger)."""
    home = database.home / "runs" / f"db-{uuid.uuid4().hex[:8]}"
    return replace(database, lake_root=str(home / "lake"), checkpoint_root=str(home / "checkpoints"), topic=topic)
