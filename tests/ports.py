"""Ports for the services a test starts of its own: one nothing listens on, chosen by the system."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nothing listens on now (the system's choice, so two test runs at once differ)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
