"""tidemark's configuration: one typed object, built once from the environment and arguments.

Nothing reads the environment at import time; entry points call :meth:`Settings.from_env` and pass
the result down. Every value has an environment variable so the same code runs on the embedded
default and on a cluster (see README, "Configuration").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _default_home() -> Path:
    # An editable install (what `make` does) keeps state next to the checkout; anything else uses
    # the working directory.
    root = PROJECT_ROOT if (PROJECT_ROOT / "pyproject.toml").exists() else Path.cwd()
    return root / ".tidemark"


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        port = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a port number; set it to an integer 1-65535") from None
    if not 0 < port < 65536:
        raise ValueError(f"{name}={port} is out of range; set it to an integer 1-65535")
    return port


@dataclass(frozen=True)
class Settings:
    """Where tidemark's services, data and jars are, and how to reach them."""

    home: Path
    kafka_port: int = 19092
    kafka_controller_port: int = 19093
    postgres_port: int = 15432
    topic: str = "events"
    bootstrap_servers: str = ""
    postgres_dsn: str = ""
    lake_root: str = ""
    checkpoint_root: str = ""
    jars_dir: Path = field(default=Path())
    # Extra Kafka client options (SASL/SSL, ...) passed through to every client, without the
    # "kafka." prefix Spark uses.
    kafka_options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Derived defaults: fill what was left empty from home and the ports.
        home = self.home.resolve()
        object.__setattr__(self, "home", home)
        if not self.bootstrap_servers:
            object.__setattr__(self, "bootstrap_servers", f"127.0.0.1:{self.kafka_port}")
        if not self.postgres_dsn:
            dsn = f"host=127.0.0.1 port={self.postgres_port} dbname=tidemark user=tidemark"
            object.__setattr__(self, "postgres_dsn", dsn)
        if not self.lake_root:
            object.__setattr__(self, "lake_root", str(home / "lake"))
        if not self.checkpoint_root:
            object.__setattr__(self, "checkpoint_root", str(home / "checkpoints"))
        if self.jars_dir == Path():
            object.__setattr__(self, "jars_dir", home / "jars")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Build settings from ``TIDEMARK_*`` variables; keyword overrides win over both."""
        env = os.environ if env is None else env
        kafka_options = {
            key[len("TIDEMARK_KAFKA_OPT_") :].lower().replace("_", "."): value
            for key, value in env.items()
            if key.startswith("TIDEMARK_KAFKA_OPT_")
        }
        settings = cls(
            home=Path(env.get("TIDEMARK_HOME") or _default_home()),
            kafka_port=_port(env, "TIDEMARK_KAFKA_PORT", 19092),
            kafka_controller_port=_port(env, "TIDEMARK_KAFKA_CONTROLLER_PORT", 19093),
            postgres_port=_port(env, "TIDEMARK_POSTGRES_PORT", 15432),
            topic=env.get("TIDEMARK_TOPIC") or "events",
            bootstrap_servers=env.get("TIDEMARK_KAFKA_BOOTSTRAP_SERVERS", ""),
            postgres_dsn=env.get("TIDEMARK_POSTGRES_DSN", ""),
            lake_root=env.get("TIDEMARK_LAKE_ROOT", ""),
            checkpoint_root=env.get("TIDEMARK_CHECKPOINT_ROOT", ""),
            jars_dir=Path(env.get("TIDEMARK_JARS_DIR") or Path()),
            kafka_options=kafka_options,
        )
        return replace(settings, **overrides) if overrides else settings

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def kafka_dir(self) -> Path:
        return self.home / "kafka"

    @property
    def postgres_dir(self) -> Path:
        return self.home / "postgres"

    def table_path(self, name: str) -> str:
        """Location of the Delta table ``name`` under the lake root (a path or an object-store URI)."""
        return f"{self.lake_root.rstrip('/')}/{name}"

    def kafka_client_config(self, **extra: object) -> dict[str, object]:
        """confluent-kafka configuration for this cluster, pass-through options included."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.kafka_options, **extra}
