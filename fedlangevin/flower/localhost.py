"""A Flower deployment on this machine: one SuperLink and N SuperNodes on 127.0.0.1.

For trying a deployed app before it goes to real machines (and for the deployment test):
the processes are the ones a real deployment runs (``flower-superlink``,
``flower-supernode``; ``flwr run`` submits the app), insecure (no TLS: loopback only), and
every one of them, with the processes they spawn, is stopped when the context exits::

    with LocalDeployment(nodes=[{"partition-id": 0}, {"partition-id": 1}]) as dep:
        dep.run_app("examples/flower_app", {"rounds": 5, "output": "/tmp/trace.pt"}, timeout=600)
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = ["LocalDeployment", "process_alive"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _children() -> dict[int, list[int]]:
    """{parent pid: child pids} of every process (Linux /proc)."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


class LocalDeployment:
    """SuperLink + SuperNodes on 127.0.0.1 as subprocesses (a context manager).

    nodes : one node-config mapping per SuperNode (e.g. ``{"partition-id": 0}``); start_timeout :
    seconds to wait for the SuperLink to listen. ``pids`` lists every process started (and, after
    :meth:`stop`, those they had spawned); :meth:`stop` ends them all (SIGTERM, then SIGKILL after
    ``grace`` seconds) and raises RuntimeError if one survives.
    """

    def __init__(self, nodes: Sequence[Mapping[str, Any]], start_timeout: float = 60.0, grace: float = 15.0) -> None:
        if len(nodes) < 1:
            raise ValueError("nodes must hold at least one node config")
        self.nodes = [dict(n) for n in nodes]
        self.start_timeout, self.grace = float(start_timeout), float(grace)
        self.bin = Path(sys.executable).parent
        if shutil.which("flower-superlink", path=str(self.bin)) is None:
            raise RuntimeError(f"flower-superlink is not installed beside {sys.executable}: pip install 'fedlangevin[flower]'")
        self.home = Path(tempfile.mkdtemp(prefix="fald-flower-"))
        self.port = _free_port()
        self.procs: list[subprocess.Popen] = []
        self.pids: set[int] = set()
        self.env = {**os.environ, "FLWR_HOME": str(self.home), "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}"}

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen:
        out = open(self.home / log, "wb")
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=self.home,
                                start_new_session=True)
        out.close()
        self.procs.append(proc)
        self.pids.add(proc.pid)
        return proc

    def start(self) -> "LocalDeployment":
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "local-deployment"\n\n[superlink.local-deployment]\n'
            f'address = "127.0.0.1:{self.port}"\ninsecure = true\n')
        self._spawn([str(self.bin / "flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port", str(self.port),
                     "--disable-runtime-dependency-installation"], "superlink.log")
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.procs[0].poll() is not None:
                    self.stop()
                    raise RuntimeError(f"the SuperLink did not start within {self.start_timeout:g} s; see its log "
                                       f"{self.home / 'superlink.log'}") from None
                time.sleep(0.2)
        for i, config in enumerate(self.nodes):
            node_config = " ".join(f"{k}={_toml_value(v)}" for k, v in config.items())
            self._spawn([str(self.bin / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{self.port}",
                         "--host", "127.0.0.1", "--port", str(_free_port()), "--node-config", node_config],
                        f"supernode-{i}.log")
        return self

    def run_app(self, app: str | os.PathLike, run_config: Mapping[str, Any] | None = None, timeout: float = 600.0
                ) -> subprocess.CompletedProcess:
        """``flwr run <app> local-deployment --stream`` with ``run_config`` overrides; waits for
        the run to end (``subprocess.TimeoutExpired`` after ``timeout`` seconds)."""
        args = [str(self.bin / "flwr"), "run", str(Path(app).resolve()), "local-deployment", "--stream"]
        if run_config:
            args += ["--run-config", " ".join(f"{k}={_toml_value(v)}" for k, v in run_config.items())]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self.env,
                                cwd=self.home, start_new_session=True)
        self.procs.append(proc)
        self.pids.add(proc.pid)
        out, _ = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(args, proc.returncode, out.decode(errors="replace"), "")

    def _tree(self) -> set[int]:
        tree, found, todo = _children(), set(), list(self.pids)
        while todo:
            pid = todo.pop()
            if pid not in found:
                found.add(pid)
                todo += tree.get(pid, [])
        return found

    def stop(self) -> None:
        """End every process started and every descendant of them; RuntimeError if one survives."""
        everyone = self._tree()
        self.pids |= everyone
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self._tree() | everyone:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            deadline = time.monotonic() + (self.grace if sig == signal.SIGTERM else 5.0)
            while time.monotonic() < deadline:
                for proc in self.procs:
                    proc.poll()  # reap our direct children
                if not any(process_alive(p) for p in self.pids):
                    break
                time.sleep(0.2)
        for proc in self.procs:
            proc.poll()
        left = sorted(p for p in self.pids if process_alive(p))
        if left:
            raise RuntimeError(f"processes {left} of the local deployment are still running")

    def log(self, name: str) -> str:
        """A process's log ("superlink.log", "supernode-0.log", ...)."""
        path = self.home / name
        return path.read_text(errors="replace") if path.exists() else ""

    def __enter__(self) -> "LocalDeployment":
        return self.start()

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.home, ignore_errors=True)
