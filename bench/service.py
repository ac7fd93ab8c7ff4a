"""The embedded service the benchmark talks to when no ``--url`` is given.

``recycle serve`` (SQLite registry, SQLite broker, local artifacts, one worker) in a subprocess on
a free local port, as ``app.demo`` starts it, plus optional extra ``recycle worker`` processes on
the same data directory (scaling out = more workers, DESIGN §3). Threads per process are pinned
through the environment (``OMP_NUM_THREADS``): on a few shared cores, PyTorch's default of one
OpenMP thread per core stalls for seconds whenever another process takes a core.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from app.client import RecycleClient

ADMIN_KEY_FILE = "admin-key"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def service_environment(threads: int | None) -> dict[str, str]:
    env = os.environ.copy()
    env.update({"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    env.setdefault("RECYCLE_BASE_MODEL_CACHE_SIZE", "4")
    if threads is not None:
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[name] = str(threads)
    repo_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = repo_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class EmbeddedService:
    """Start ``recycle serve`` (and extra workers on demand); stop everything on exit."""

    def __init__(self, data_dir: Path, threads: int | None = None, batch_max_adapters: int | None = None) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = service_environment(threads)
        self.env["RECYCLE_DATA_DIR"] = str(self.data_dir)
        if batch_max_adapters is not None:
            self.env["RECYCLE_BATCH_MAX_ADAPTERS"] = str(batch_max_adapters)
        self.process: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self.log_path = self.data_dir / "service.log"

    def __enter__(self) -> EmbeddedService:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "app.cli", "serve", "--port", str(self.port), "--data-dir", str(self.data_dir)]
        # its own process group, so stopping it also stops the worker it supervises
        self.process = subprocess.Popen(
            command, stdout=self.log_path.open("ab"), stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        with RecycleClient(self.url) as client:
            while time.monotonic() < deadline:
                if self.process is not None and self.process.poll() is not None:
                    raise RuntimeError(f"the embedded service exited; see {self.log_path}")
                try:
                    client.readyz()
                    if (self.data_dir / ADMIN_KEY_FILE).is_file():
                        return
                except Exception:  # noqa: BLE001 (not up yet)
                    pass
                time.sleep(0.5)
        raise RuntimeError(f"the embedded service was not ready in {timeout:.0f} s; see {self.log_path}")

    def admin_key(self) -> str:
        return (self.data_dir / ADMIN_KEY_FILE).read_text().strip()

    def add_worker(self) -> None:
        """One more ``recycle worker`` on the same registry, broker and artifacts."""
        log = (self.data_dir / f"worker-extra-{len(self.workers) + 1}.log").open("ab")
        command = [sys.executable, "-m", "app.cli", "worker", "--data-dir", str(self.data_dir)]
        self.workers.append(
            subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        )

    def __exit__(self, *exc: object) -> None:
        for process in [*self.workers, self.process]:
            if process is not None and process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for process in [*self.workers, self.process]:
            if process is None:
                continue
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
