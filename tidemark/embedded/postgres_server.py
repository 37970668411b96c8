"""A local PostgreSQL server under the project's state folder, run as an unprivileged user.

PostgreSQL refuses to run as root. When tidemark runs as root (containers, CI), the server runs as
the ``postgres`` system user that Debian's server package creates; otherwise as the current user.
The embedded server listens on 127.0.0.1 only and trusts local connections: it is a development
server. A real deployment points ``TIDEMARK_POSTGRES_DSN`` at its own server (README, "Running on a
cluster").
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.settings import Settings
from tidemark.embedded.process import ServiceError, ensure_port_free, log_tail, port_open, wait_until

SERVICE_USER = "postgres"


def postgres_bin_dir() -> Path:
    """The directory holding initdb and pg_ctl (Debian keeps them off PATH)."""
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if not candidates:
        raise ServiceError(
            "PostgreSQL server binaries (initdb, pg_ctl) were not found. Install the server "
            "(Debian/Ubuntu: apt-get install postgresql) or put its bin directory on PATH."
        )
    return Path(candidates[-1]).parent


@dataclass(frozen=True)
class PostgresServer:
    settings: Settings

    @property
    def data_dir(self) -> Path:
        return self.settings.postgres_dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.settings.postgres_dir / "run"

    @property
    def log_file(self) -> Path:
        # Written by the server's user, so it lives in the folder that user owns.
        return self.settings.postgres_dir / "postgres.log"

    def _as_service_user(self, argv: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return argv
        if shutil.which("runuser") is None:
            raise ServiceError("running as root needs `runuser` to start PostgreSQL as an unprivileged user")
        return ["runuser", "-u", SERVICE_USER, "--", *argv]

    def _run(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self._as_service_user(argv), capture_output=True, text=True, check=check)

    def pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (FileNotFoundError, PermissionError, ValueError, IndexError):
            return None

    def is_running(self) -> bool:
        if not self.data_dir.exists():
            return False
        status = self._run([str(postgres_bin_dir() / "pg_ctl"), "-D", str(self.data_dir), "status"], check=False)
        return status.returncode == 0

    def start(self, timeout: float = 60.0) -> str:
        """Initialise (first time), start, and create the ``tidemark`` role and database."""
        port = self.settings.postgres_port
        if self.is_running():
            self._wait_ready(timeout)
            self.ensure_database()
            return f"PostgreSQL already running (pid {self.pid()}) on 127.0.0.1:{port}"
        ensure_port_free(port, "PostgreSQL", "TIDEMARK_POSTGRES_PORT=<port>")
        bin_dir = postgres_bin_dir()
        self._prepare_dirs()
        if not (self.data_dir / "PG_VERSION").exists():
            init = self._run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-instructions",
                ],
                check=False,
            )
            if init.returncode != 0:
                raise ServiceError(f"initdb failed:\n{init.stdout}{init.stderr}")
        options = f"-p {port} -k {self.socket_dir} -c listen_addresses=127.0.0.1"
        started = self._run(
            [
                str(bin_dir / "pg_ctl"),
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_file),
                "-o",
                options,
                "-w",
                "-t",
                str(int(timeout)),
                "start",
            ],
            check=False,
        )
        if started.returncode != 0:
            raise ServiceError(f"PostgreSQL did not start: {started.stderr.strip()}{log_tail(self.log_file)}")
        self._wait_ready(timeout)
        self.ensure_database()
        return f"PostgreSQL started (pid {self.pid()}) on 127.0.0.1:{port}"

    def _prepare_dirs(self) -> None:
        for path in (self.settings.postgres_dir, self.socket_dir):
            path.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.settings.postgres_dir, SERVICE_USER, SERVICE_USER)
            shutil.chown(self.socket_dir, SERVICE_USER, SERVICE_USER)
            os.chmod(self.settings.postgres_dir, 0o700)
            probe = self._run(["test", "-w", str(self.settings.postgres_dir)], check=False)
            if probe.returncode != 0:
                raise ServiceError(
                    f"the '{SERVICE_USER}' user cannot reach {self.settings.postgres_dir} (a parent "
                    "folder is not searchable by other users). Clone tidemark somewhere other users "
                    "can traverse, or set TIDEMARK_HOME to such a folder."
                )

    def _wait_ready(self, timeout: float) -> None:
        wait_until(lambda: port_open(self.settings.postgres_port), timeout, "PostgreSQL", self.log_file)

    def superuser_dsn(self) -> str:
        return f"host=127.0.0.1 port={self.settings.postgres_port} dbname=postgres user=postgres"

    def ensure_database(self, name: str = "tidemark", owner: str = "tidemark") -> None:
        """Create the login role ``owner`` and the database ``name`` it owns, if they are missing."""
        from psycopg2 import sql

        from spark_jobs import db

        # A server that is down is one line that says what to do.
        with db.session(self.superuser_dsn()) as conn, conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (owner,))
            if cur.fetchone() is None:
                cur.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(owner)))
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cur.fetchone() is None:
                cur.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(owner)))

    def stop(self) -> str:
        if not self.is_running():
            return "PostgreSQL is not running"
        pid = self.pid()
        stopped = self._run(
            [str(postgres_bin_dir() / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop"],
            check=False,
        )
        if stopped.returncode != 0:
            raise ServiceError(f"PostgreSQL did not stop: {stopped.stderr.strip()}")
        return f"PostgreSQL stopped (pid {pid})"
