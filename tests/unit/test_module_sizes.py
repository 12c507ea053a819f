"""No module of the package grows past 600 lines: a bigger one is split along its concerns
(docs/architecture.md), before it becomes the place every change goes."""

from __future__ import annotations

from pathlib import Path

import leasectl

LIMIT = 600
PACKAGE = Path(leasectl.__file__).parent


def test_no_module_is_over_the_limit() -> None:
    sizes = {
        str(path.relative_to(PACKAGE.parent)): len(path.read_text(encoding="utf-8").splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    assert len(sizes) > 100  # (the package was found)
    over = {path: lines for path, lines in sorted(sizes.items()) if lines > LIMIT}
    assert over == {}, f"split these modules along their concerns: {over}"
