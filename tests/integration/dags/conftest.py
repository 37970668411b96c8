"""The UI tests' browser: Debian's headless Chromium through its chromedriver (no browser download)."""

from __future__ import annotations

import shutil

import pytest

from tests.integration.dags.airflow_ui import CHROMEDRIVER, CHROMIUM, new_browser


@pytest.fixture
def browser():
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.fail("Debian's chromium and chromium-driver are needed (apt-get install chromium chromium-driver)")
    driver = new_browser()
    yield driver
    driver.quit()
