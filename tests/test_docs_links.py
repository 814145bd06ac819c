"""The README and the docs pages cite only what the repository holds: no path outside it
(a developer's ``../shared`` folder is not part of a user's clone)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_page_cites_a_path_outside_the_repository():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    outside = [(p.name, m.group(0)) for p in pages for m in re.finditer(r"(?<![.\w])\.\./[\w./-]*", p.read_text())]
    assert outside == []
    assert not [p.name for p in pages if "shared/papers" in p.read_text() or "shared/notes" in p.read_text()]
