"""docs/distributed.md: the example runs as a script (its worker must be importable by the
spawned processes, so it is written to a file, not exec'd) and prints what the page says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "distributed.md"


def test_the_example_runs_and_matches_one_process(tmp_path):
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
                if b.startswith('"""distributed_demo.py')]
    script = tmp_path / "distributed_demo.py"
    script.write_text(block)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    match = re.fullmatch(r"\(8, 50, 2\) max \|W=2 - single\| = (\S+)\n", done.stdout)
    assert match, done.stdout
    assert float(match.group(1)) < 1e-12  # summation order only (see the page)
