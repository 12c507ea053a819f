"""Constants and small helpers shared by the embedded server's modules."""

from __future__ import annotations

import os
import socket
from pathlib import Path

HOST = "127.0.0.1"
SUPERUSER = "postgres"
DEFAULT_SERVER_USER = "nobody"
ROOT_DEFAULT_DIR = Path("/var/lib/leasectl/embedded")
CACHE_DIR = Path("/var/cache/leasectl")  # preferred: root-only, and no tmpfiles ageing
CACHE_FALLBACK = Path("/var/tmp")
MARKER = ".leasectl-embedded"
RUNTIME_CONF = "leasectl.conf"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0
SOCKET_PATH_MAX = 100  # sun_path is 108 bytes on Linux, 104 on macOS; leave slack.


def is_root() -> bool:
    return os.geteuid() == 0


def one_line(text: str) -> str:
    """Error messages must fit on one line: the CLI prints them as is."""
    return " ".join(text.split())


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def conf_quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
