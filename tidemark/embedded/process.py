"""Process and port helpers shared by the embedded services."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from spark_jobs.errors import TidemarkError


class ServiceError(TidemarkError):
    """A local service cannot start or stop; the message says what to fix."""


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        return sock.connect_ex((host, port)) == 0


def ensure_port_free(port: int, what: str, setting: str) -> None:
    """``setting`` is how the user picks another port, e.g. ``TIDEMARK_KAFKA_PORT=<port>``."""
    if port_open(port):
        raise ServiceError(
            f"port {port} is already in use by another process, so {what} cannot listen on it. "
            f"Stop that process or choose another port with {setting}."
        )


def running(pid: int) -> bool:
    """Whether process ``pid`` runs. One that has exited is not running even while its parent has not
    reaped it yet (a zombie: `tidemark airflow` under a parent that waits for it later)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc to ask: kill(0) said it exists
    return state != "Z"


def read_pid(pid_file: Path) -> int | None:
    """The PID in ``pid_file`` if that process is running, else None."""
    try:
        pid = int(pid_file.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None
    return pid if running(pid) else None


def stop_pid(pid: int, timeout: float = 30.0) -> None:
    """SIGTERM ``pid``, wait up to ``timeout`` seconds, then SIGKILL it."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not running(pid):
            with contextlib.suppress(ChildProcessError):  # reap it if it is our child
                os.waitpid(pid, os.WNOHANG)
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def wait_until(check: Callable[[], bool], timeout: float, what: str, log: Path | None = None) -> None:
    """Poll ``check`` until it is true; on time-out raise with the tail of ``log``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise ServiceError(f"{what} did not become ready within {timeout:.0f} s.{log_tail(log)}")


def log_tail(log: Path | None, lines: int = 15) -> str:
    if log is None or not log.exists():
        return ""
    tail = log.read_text(errors="replace").splitlines()[-lines:]
    return f"\nLast lines of {log}:\n" + "\n".join(tail)


# What a failed start-up's log says about why, most telling first: the line the user needs is
# often thousands of lines before the shutdown noise at the end.
FATAL = ("Address already in use", "failed to bind", "FATAL")
CAUSES = (*FATAL, "ERROR", "Exception")


def log_cause(log: Path, offset: int = 0, causes: tuple[str, ...] = CAUSES) -> str | None:
    """The first line of ``log`` (from byte ``offset``: this start-up's part) that says why a
    service failed (``causes``, most telling first), without its timestamp and logger prefix; None
    when none does."""
    if not log.exists():
        return None
    with open(log, "rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    for cause in causes:
        for line in lines:
            if cause in line:
                text = line.split("] ", 1)[-1] if line.startswith("[") else line  # "[2026-… ] ERROR …"
                return text.strip()[:400]
    return None


def java_major_version(java: str | None = None) -> int:
    """Major version of the ``java`` on JAVA_HOME or PATH; raises ServiceError if there is none."""
    java = java or java_executable()
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, check=True).stderr
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ServiceError(
            f"could not run {java} ({exc}). Install Java 17 or newer (Debian: apt-get install "
            "openjdk-17-jre-headless) or set JAVA_HOME."
        ) from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise ServiceError(f"could not read the Java version from: {out.strip()!r}")
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 else major


def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise ServiceError(
            "Java is not installed: tidemark's Kafka broker and Spark need Java 17 or newer. "
            "Install it (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME."
        )
    return java


def require_java(minimum: int = 17) -> str:
    java = java_executable()
    major = java_major_version(java)
    if major < minimum:
        raise ServiceError(
            f"{java} is Java {major}; tidemark needs Java {minimum} or newer. Install it or point JAVA_HOME at one."
        )
    return java
