"""The built wheel is what users install: in a fresh virtual environment it carries every SQL
file and stylesheet, and `leasectl demo --headless` runs from it (not from this checkout)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Files the package reads at run time besides its modules.
DATA = ("*.sql", "*.tcss")


def _run(
    *args: str | Path, timeout: float, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(a) for a in args],
        capture_output=True, text=True, check=False, timeout=timeout, cwd=cwd, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, f"{args}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.full
@pytest.mark.timeout(900)
def test_a_built_wheel_installs_in_a_fresh_venv_and_runs_the_demo(
    tmp_path: Path, embedded_dir: Path
) -> None:
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, ROOT, timeout=300)
    (wheel,) = dist.glob("leasectl-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    for pattern in DATA:
        files = [p.relative_to(ROOT).as_posix() for p in (ROOT / "leasectl").rglob(pattern)]
        assert files, pattern
        assert sorted(set(files) - shipped) == []

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    _run(python, "-m", "pip", "install", "-q", "-c", ROOT / "constraints.txt", wheel, timeout=600)
    where = _run(
        python, "-c", "import leasectl; print(leasectl.__file__)", cwd=tmp_path, timeout=60
    )
    assert where.stdout.strip().startswith(str(env_dir)), where.stdout

    env = {k: v for k, v in os.environ.items() if k not in ("LEASECTL_DSN", "DATABASE_URL")}
    env["LEASECTL_EMBEDDED_DIR"] = str(embedded_dir)  # reachable by `nobody` when root
    demo = _run(
        env_dir / "bin" / "leasectl", "demo", "--headless", "--duration", "5s",
        cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    assert "lost 0, unfinished 0" in demo.stdout, demo.stdout + demo.stderr
