"""Airflow on this machine: what ``airflow standalone`` runs, bound to 127.0.0.1 and stopped cleanly.

``airflow standalone`` starts the scheduler, dag-processor, triggerer and api-server. It cannot be
told to stay on loopback: its scheduler and triggerer always start log servers on all interfaces
(ports 8793/8794), and a SIGTERM to its parent leaves the components and their workers running.
So tidemark starts the same four components itself:

* api-server on ``127.0.0.1:<port>``; scheduler and triggerer with ``--skip-serve-logs`` (the
  api-server reads task logs from the local files);
* LocalExecutor with a small parallelism for 2 cores; metadata in the embedded PostgreSQL
  (database ``airflow``), so the executor's processes do not contend for a SQLite file;
* this project's ``dags/`` and ``plugins/``, and the connections as ``AIRFLOW_CONN_*`` variables
  built from tidemark's settings (no secrets in files);
* each component in its own process group, so stopping a component stops its workers; the
  scheduler is stopped first, so it launches nothing while the others go.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from spark_jobs.settings import PROJECT_ROOT, Settings
from tidemark.embedded.process import ServiceError, ensure_port_free, log_tail, port_open, read_pid, stop_pid

COMPONENTS = {  # started in this order, stopped scheduler first
    "api-server": ["api-server", "--host", "127.0.0.1", "--port", "{port}"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
}
STOP_ORDER = ("scheduler", "triggerer", "dag-processor", "api-server")
HEALTHY_COMPONENTS = ("metadatabase", "scheduler", "triggerer", "dag_processor")
AUTH_MANAGERS = {  # which Airflow auth manager the components run: the simple one, or FAB's (roles, per-DAG access)
    "simple": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
    "fab": "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager",
}


class AirflowServices:
    """The four Airflow components for this project, under ``<TIDEMARK_HOME>/airflow``."""

    def __init__(
        self,
        settings: Settings,
        port: int = 8080,
        parallelism: int = 4,
        metadata_database: str = "airflow",
        users: str = "admin:admin",  # the simple auth manager's NAME:ROLE,... (FAB: admin, then add_user)
        auth_manager: str = "simple",  # or "fab"
        extra_env: dict[str, str] | None = None,  # more configuration, e.g. AIRFLOW__OPENLINEAGE__TRANSPORT
    ) -> None:
        if auth_manager not in AUTH_MANAGERS:
            raise ValueError(f"auth_manager must be one of {sorted(AUTH_MANAGERS)}, not {auth_manager!r}")
        self.settings = settings
        self.port = port
        self.parallelism = parallelism
        self.metadata_database = metadata_database
        self.users = users
        self.auth_manager = auth_manager
        self.extra_env = dict(extra_env or {})
        self.home = settings.home / metadata_database

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metadata_dsn(self) -> str:
        return f"postgresql+psycopg2://tidemark@127.0.0.1:{self.settings.postgres_port}/{self.metadata_database}"

    @property
    def password_file(self) -> Path:
        """The users' passwords: the simple auth manager generates them; with FAB, :meth:`add_user` does."""
        if self.auth_manager == "fab":
            return self.home / "fab_passwords.json.generated"
        return self.home / "simple_auth_manager_passwords.json.generated"

    def _pid_file(self, component: str) -> Path:
        return self.home / f"{component}.pid"

    def _log_file(self, component: str) -> Path:
        return self.home / "logs" / f"{component}.log"

    def connections(self) -> dict[str, str]:
        """``AIRFLOW_CONN_*`` for the embedded services (Spark local mode)."""
        from psycopg2.extensions import parse_dsn

        dsn = parse_dsn(self.settings.postgres_dsn)
        kafka_extra = {"bootstrap.servers": self.settings.bootstrap_servers, **self.settings.kafka_options}
        postgres = {
            "conn_type": "postgres",
            "host": dsn.get("host", "127.0.0.1"),
            "port": int(dsn.get("port", 5432)),
            "schema": dsn.get("dbname", "tidemark"),
            "login": dsn.get("user", "tidemark"),
        }
        return {
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "AIRFLOW_CONN_TIDEMARK_KAFKA": json.dumps({"conn_type": "generic", "extra": kafka_extra}),
            "AIRFLOW_CONN_TIDEMARK_POSTGRES": json.dumps(postgres),
        }

    def environment(self) -> dict[str, str]:
        venv_bin = str(Path(sys.executable).parent)
        env = dict(os.environ) | self.settings.to_env() | self.connections()
        for key in ("AIRFLOW_CONN_SPARK_DEFAULT", "AIRFLOW_CONN_TIDEMARK_KAFKA", "AIRFLOW_CONN_TIDEMARK_POSTGRES"):
            env[key] = os.environ.get(key) or env[key]  # the user's own connection wins
        env |= {
            "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",  # spark-submit, airflow
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(self.parallelism),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": self.users,
            "AIRFLOW__CORE__AUTH_MANAGER": AUTH_MANAGERS[self.auth_manager],
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.metadata_dsn,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        }
        return env | self.extra_env

    def running(self) -> dict[str, int]:
        return {c: pid for c in COMPONENTS if (pid := read_pid(self._pid_file(c))) is not None}

    def start(self, timeout: float = 180.0) -> None:
        """Migrate the metadata database, start the components, wait until all report healthy."""
        from tidemark.embedded.postgres_server import PostgresServer

        if self.running():
            raise ServiceError(f"Airflow is already running from {self.home} (components {sorted(self.running())})")
        ensure_port_free(self.port, "the Airflow API server", "`tidemark airflow --port <port>`")
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        PostgresServer(self.settings).ensure_database(self.metadata_database, "tidemark")
        env = self.environment()
        airflow = str(Path(sys.executable).parent / "airflow")
        self.cli("db", "migrate")
        if self.auth_manager == "fab" and "admin" not in self._passwords():
            self.add_user("admin", "Admin")
        for component, argv in COMPONENTS.items():
            log = self._log_file(component).open("ab")
            process = subprocess.Popen(
                [airflow, *(a.format(port=self.port) for a in argv)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stopping it stops its workers
            )
            self._pid_file(component).write_text(f"{process.pid}\n")
        try:
            self._wait_healthy(timeout)
        except ServiceError:
            self.stop()
            raise

    def health(self) -> dict[str, str]:
        with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=5) as response:
            body = json.load(response)
        return {name: body.get(name, {}).get("status", "unknown") for name in HEALTHY_COMPONENTS}

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        status: dict[str, str] = {}
        while time.monotonic() < deadline:
            dead = [c for c in COMPONENTS if read_pid(self._pid_file(c)) is None]
            if dead:
                raise ServiceError(f"Airflow {dead[0]} exited.{log_tail(self._log_file(dead[0]))}")
            if port_open(self.port):
                try:
                    status = self.health()
                except OSError:
                    status = {}
                if status and all(s == "healthy" for s in status.values()):
                    return
            time.sleep(1.0)
        raise ServiceError(f"Airflow did not become healthy within {timeout:.0f} s: {status or 'no answer'}")

    @property
    def foreground_pid_file(self) -> Path:
        """Where ``tidemark airflow`` (``make airflow``), which runs the components in the foreground, keeps its PID."""
        return self.home / "tidemark-airflow.pid"

    def stop(self, timeout: float = 30.0) -> list[str]:
        """Stop every component and its workers, scheduler first. When ``tidemark airflow`` runs them in the
        foreground (another process), it is asked to stop them itself, as Ctrl-C would: it then ends with
        status 0, not as if a component had died under it."""
        stopped = []
        foreground = read_pid(self.foreground_pid_file)
        if foreground is not None and foreground != os.getpid():
            running = self.running()
            stop_pid(foreground, timeout=len(STOP_ORDER) * (timeout + 10))
            stopped += [c for c in STOP_ORDER if c in running]
        for component in STOP_ORDER:
            pid = read_pid(self._pid_file(component))
            if pid is not None:
                _stop_group(pid, timeout)
                stopped.append(component)
            self._pid_file(component).unlink(missing_ok=True)
        return list(dict.fromkeys(stopped))

    def login(self, user: str = "admin") -> tuple[str, str]:
        """``user`` and the password the api-server (or :meth:`add_user`) generated for it."""
        return user, self._passwords()[user]

    def _passwords(self) -> dict[str, str]:
        return json.loads(self.password_file.read_text()) if self.password_file.exists() else {}

    def cli(self, *argv: str) -> str:
        """Run ``airflow ARGV...`` against these components' configuration and metadata; its output."""
        airflow = str(Path(sys.executable).parent / "airflow")
        done = subprocess.run([airflow, *argv], env=self.environment(), capture_output=True, text=True)
        if done.returncode != 0:
            raise ServiceError(f"airflow {' '.join(argv[:2])} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        return done.stdout

    def add_user(self, name: str, role: str) -> None:
        """A FAB user ``name`` in ``role`` with a generated password (kept beside the metadata, readable by the
        owner only, as the simple auth manager keeps its own)."""
        import secrets

        if self.auth_manager != "fab":
            raise ValueError("users are added with the FAB auth manager; the simple one takes `users`")
        password = secrets.token_urlsafe(12)
        self.cli("users", "create", "--username", name, "--password", password, "--role", role,
                 "--email", f"{name}@tidemark.invalid", "--firstname", name, "--lastname", "tidemark")  # fmt: skip
        passwords = self._passwords() | {name: password}
        self.home.mkdir(parents=True, exist_ok=True)
        self.password_file.touch(mode=0o600)
        self.password_file.write_text(json.dumps(passwords))


def _stop_group(pid: int, timeout: float) -> None:
    """SIGTERM a component's process group, wait, then SIGKILL whatever is left of it."""
    try:
        group = os.getpgid(pid)
    except ProcessLookupError:
        return
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        return
    stop_pid(pid, timeout)  # waits for the leader; SIGKILLs it after the timeout
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
