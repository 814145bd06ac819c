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


def printed_and_shown(page: Path) -> tuple[list[str], list[str]]:
    """A page with one python block followed by "prints" and its output indented by four spaces
    (up to the next ``## `` section): (the lines the block prints, the lines the page shows), stripped."""
    (code,) = python_blocks(page)
    printed = [line.strip() for line in run_block(code, page).strip().splitlines()]
    block = page.read_text().split("prints", 1)[1].split("\n## ", 1)[0]
    return printed, [line.strip() for line in block.splitlines() if line.startswith("    ")]
