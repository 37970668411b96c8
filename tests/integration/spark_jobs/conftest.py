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
