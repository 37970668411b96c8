"""Every make target checks the system packages it needs before any work (tools/system-packages.sh):
one place knows them, a target needs at least what its prerequisites need (so one apt-get install
covers a whole `make demo`), and a user who cannot install them gets one line with the command.

The install itself (as root, on a machine without them) is what `make test-fresh` shows: `make demo`
and `make test` in a fresh Debian 12 container."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "system-packages.sh"
MAKEFILE = (ROOT / "Makefile").read_text()
# Targets that run nothing but make's own work, or stop what others started.
NO_SYSTEM = {"help", "down", "clean"}


def documented_targets() -> dict[str, list[str]]:
    """Each target `make help` lists, with its prerequisites."""
    found = re.findall(r"^([a-z-]+):([^#\n]*)##", MAKEFILE, re.MULTILINE)
    return {name: prerequisites.split() for name, prerequisites in found}


def listed(target: str) -> list[str]:
    """The Debian packages ``make target`` needs, in the order its one line names them."""
    run = subprocess.run([str(SCRIPT), "--list", target], capture_output=True, text=True, check=True)
    return run.stdout.split()


def packages(target: str) -> set[str]:
    return set(listed(target))


def test_every_target_checks_the_system_first() -> None:
    targets = documented_targets()
    assert {"demo", "test", "test-airflow", "test-fresh"} <= targets.keys()
    for name, prerequisites in targets.items():
        if name in NO_SYSTEM:
            continue
        assert prerequisites[:1] == [f"system-{name}"], f"make {name} does not start with system-{name}"
        assert packages(name), f"tools/system-packages.sh knows no package for make {name}"


def test_a_target_needs_what_its_prerequisites_need() -> None:
    """So the first step of `make demo` installs everything it will need in one apt-get run."""
    targets = documented_targets()
    for name, prerequisites in targets.items():
        for prerequisite in prerequisites:
            if prerequisite in targets and prerequisite not in NO_SYSTEM and name not in NO_SYSTEM:
                missing = packages(prerequisite) - packages(name)
                assert not missing, f"make {name} runs make {prerequisite}, which needs {missing} too"


def test_nothing_is_installed_that_a_target_does_not_need() -> None:
    assert {"chromium", "chromium-driver"} <= packages("test-airflow")
    assert not {"chromium", "chromium-driver", "docker.io"} & packages("test")
    assert not {"postgresql", "chromium"} & packages("test-unit")
    assert packages("lint") == {"python3", "python3-venv"}


def test_an_unknown_target_is_an_error_naming_it() -> None:
    run = subprocess.run([str(SCRIPT), "no-such-target"], capture_output=True, text=True)
    assert run.returncode == 2 and "no-such-target" in run.stderr


def found(tool: str) -> str:
    """The path of ``tool`` on this machine's PATH."""
    path = shutil.which(tool)
    assert path is not None, f"{tool} is not on PATH"
    return path


@pytest.fixture
def bare_path() -> Iterator[str]:
    """A PATH with make, bash and apt-get but no Python, JDK, Maven, Chromium or sudo (in a folder
    `nobody` can read: pytest's own temporary folders are the user's only)."""
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o755)
        for tool in ("make", "bash", "env", "id", "sed", "grep", "head", "apt-get"):
            (Path(folder) / tool).symlink_to(found(tool))
        yield folder


def as_a_user_without_sudo(command: list[str], path: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run as `nobody` when the tests run as root (CI does), else as the user running them."""
    if os.geteuid() == 0:
        command = [found("setpriv"), "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    env = {"PATH": path, "PYTHON": "/nonexistent/python3", "HOME": "/nonexistent"}
    started = time.monotonic()
    run = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    return run, time.monotonic() - started


@pytest.mark.parametrize("target", sorted(set(documented_targets()) - NO_SYSTEM))
def test_a_user_who_cannot_install_gets_one_line_with_the_command(bare_path: str, target: str) -> None:
    """Every target, as a user without sudo on a machine that lacks all it needs (but the PostgreSQL
    server, where this machine has it: it is found off PATH)."""
    has_postgres = Path("/usr/lib/postgresql").exists() or shutil.which("pg_ctl")
    lacking = " ".join(p for p in listed(target) if not (has_postgres and p == "postgresql"))
    run, seconds = as_a_user_without_sudo([found("make"), target], bare_path)
    assert run.returncode != 0
    ours = [line for line in run.stderr.splitlines() if line.startswith("tidemark:")]
    assert len(ours) == 1, run.stderr
    assert ours == [
        f"tidemark: make {target} needs {lacking} ({ours[0].split(' (', 1)[1].split(')')[0]}); run: "
        f"sudo sh -c 'apt-get update && apt-get install -y --no-install-recommends {lacking}'"
    ], run.stderr
    # Nothing else ran: make's own error line is the only other output.
    assert run.stdout == "" and len(run.stderr.splitlines()) == 2, run.stderr
    assert re.fullmatch(rf"make: \*\*\* \[Makefile:\d+: system-{target}\] Error 1", run.stderr.splitlines()[1])
    assert seconds < 1.0, f"make {target} took {seconds:.2f} s to stop"
