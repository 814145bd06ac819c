"""The report skeleton every study shares: tidy rows, a progress bar, CSV files, text tables
and a matplotlib figure backend that needs no display.

A study collects its rows in :class:`Rows` (named columns of equal length), shows a
:func:`progress_bar` while it runs, and returns a :class:`StudyResult` (columns, figure, text
table, settings), which writes ``<name>.csv`` and ``<name>.png``. Studies whose rows are
records (dicts with possibly different keys) write them with :func:`write_csv`.
"""

from __future__ import annotations

import csv
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

__all__ = ["Rows", "StudyResult", "format_cell", "progress_bar", "pyplot", "slug", "text_table", "write_csv"]


class Rows:
    """Columns of equal length, filled one row at a time; a missing value is ``None``."""

    def __init__(self, *names: str) -> None:
        self.columns: dict[str, list] = {n: [] for n in names}

    def add(self, **values) -> None:
        for k, col in self.columns.items():
            col.append(values.get(k))


@dataclass
class StudyResult:
    """Tidy data (``columns``: equal-length lists), a figure, a text table and the settings."""

    name: str
    columns: dict[str, list]
    figure: Any
    table: str
    settings: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def num_rows(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def to_csv(self, path: str | Path) -> Path:
        path = Path(path)
        names = list(self.columns)
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(names)
            for row in zip(*(self.columns[c] for c in names)):
                w.writerow(["" if v is None else (f"{v:.8g}" if isinstance(v, float) else v) for v in row])
        return path

    def save(self, out: str | Path) -> tuple[Path, Path]:
        """Write ``<out>/<name>.png`` and ``<out>/<name>.csv``; returns their paths."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        png = out / f"{self.name}.png"
        self.figure.savefig(png, dpi=110)
        return png, self.to_csv(out / f"{self.name}.csv")


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write records (dicts) as CSV: the union of their keys in first-seen order, floats to 6
    significant digits."""
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})


def slug(name: str) -> str:
    """A file-name stem for a data set name or path (letters, digits, '-' and '_')."""
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in Path(name).name) or "data"


def progress_bar(total: int, desc: str, enabled: bool | None, unit: str = "run", **options: Any):
    """A tqdm bar on stderr, or ``None`` when disabled (``enabled=None``: only on a TTY).

    ``options`` go to tqdm (e.g. ``leave=False``, ``mininterval=1.0``)."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, **options)


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def format_cell(x, digits: int = 4) -> str:
    """A table cell: ``-`` for ``None``, floats to ``digits`` significant digits."""
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def text_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A right-aligned plain-text table with a rule under the header."""
    cells = [[format_cell(v) for v in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)] if cells else [len(h) for h in header]
    line = "  ".join(h.rjust(w) for h, w in zip(header, widths))
    out = [line, "-" * len(line)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(out)
