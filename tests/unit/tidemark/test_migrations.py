from pathlib import Path

import pytest

from tidemark.migrations import SQL_DIR, MigrationError, discover


def test_project_migrations_are_ordered_and_well_named() -> None:
    versions = [m.version for m in discover(SQL_DIR)]
    assert versions == sorted(versions) and versions[0] == 1
    assert len(set(versions)) == len(versions)


def test_misnamed_file_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "create_things.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match="NNNN_description.sql"):
        discover(tmp_path)


def test_duplicate_version_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "0001_a.sql").write_text("SELECT 1;")
    (tmp_path / "0001_b.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match="share version 1"):
        discover(tmp_path)
