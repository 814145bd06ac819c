"""Running the Python examples of a docs page: every test of a page's examples uses these two."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path


def python_blocks(page: Path) -> list[str]:
    """The bodies of the page's fenced ```python blocks, in order."""
    return re.findall(r"```python\n(.*?)```", Path(page).read_text(), flags=re.S)


def run_block(code: str, page: Path, namespace: dict | None = None, name: str = "__main__") -> str:
    """Execute ``code`` (a block of ``page``, named after it in tracebacks) and return what it
    printed; ``namespace``: shared between blocks that build on each other (default: a fresh one
    with ``__name__`` = ``name``)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(page), "exec"), {"__name__": name} if namespace is None else namespace)
    return out.getvalue()
