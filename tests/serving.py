"""A real ``recycle serve`` process for end-to-end tests (browser, command line, metrics).

Embedded mode: uvicorn, SQLite registry, SQLite broker and the worker subprocess the command
starts, in a temporary data directory, on a free port. The admin key it creates on first start
is read from ``<data_dir>/admin-key``. Its log (JSON lines, API and worker) is kept for asserts
and for failure messages.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]

FAST_ENGINE_ENV = {
    "RECYCLE_PROGRESS_THROTTLE_SECONDS": "0.2",
    "RECYCLE_REAPER_INTERVAL_SECONDS": "1",
    "RECYCLE_HEARTBEAT_SECONDS": "1",
    "RECYCLE_WORKER_LOST_SECONDS": "20",
    "RECYCLE_LOG_FORMAT": "json",
    "PYTHONUNBUFFERED": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Served:
    url: str
    api_key: str
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes]

    def log_tail(self, chars: int = 8000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def log_records(self) -> list[dict]:
        """The JSON log lines written so far (other lines skipped)."""
        records = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return records


@contextmanager
def serve(
    root: Path, *, env: dict[str, str] | None = None, ready_timeout: float = 120.0
) -> Iterator[Served]:
    """Start ``python -m app.cli serve`` on a free port; stop it (and its worker) at the end."""
    data_dir = root / "service"
    port = free_port()
    log_path = root / "serve.log"
    environment = {**os.environ, **FAST_ENGINE_ENV, **(env or {})}
    for name in (
        "RECYCLE_URL",
        "RECYCLE_API_KEY",
        "RECYCLE_DATABASE_URL",
        "RECYCLE_BROKER_URL",
        "RECYCLE_ARTIFACT_ROOT",
    ):
        environment.pop(name, None)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app.cli",
                "serve",
                "--port",
                str(port),
                "--data-dir",
                str(data_dir),
            ],
            cwd=REPO_ROOT,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"recycle serve exited with {process.returncode}:\n{log_path.read_text()[-4000:]}"
                )
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("recycle serve not ready:\n" + log_path.read_text()[-4000:])
            time.sleep(0.5)
        yield Served(url, (data_dir / "admin-key").read_text().strip(), data_dir, log_path, process)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def make_story_files(root: Path) -> dict[str, Path]:
    """Tiny encoder v1, an upgraded v2 (continual pre-training), a task, a plain-PEFT adapter.

    The same files as the integration tests' ``tiny`` fixture (tests/integration/conftest.py).
    """
    from recycling_core.tiny import make_corpus, make_synthetic_task, make_tiny_model
    from recycling_core.upgrade import UpgradeConfig, UpgradeRequest, simulate_upgrade
    from tests.integration.worker_helpers import build_lora_adapter

    v1 = make_tiny_model(root / "v1", "encoder", seed=0)
    corpus = make_corpus(root / "corpus.txt", 300, seed=1, domain="b")
    v2 = root / "v2"
    simulate_upgrade(
        UpgradeRequest(v1, corpus, v2, UpgradeConfig(steps=20, learning_rate=5e-4, max_length=64))
    )
    task = make_synthetic_task(root / "task", n_train=96, n_dev=24, n_test=24, num_labels=3)
    labels = json.loads((task / "task.json").read_text())["labels"]
    adapter = build_lora_adapter(v1, root / "lora", labels)
    return {"v1": v1, "v2": v2, "task": task, "adapter": adapter}


def adapter_labels(adapter_dir: Path) -> list[str]:
    """The adapter's labels in id order (a task registered for it must use this order)."""
    label2id = json.loads((adapter_dir / "label2id.json").read_text())
    return sorted(label2id, key=label2id.__getitem__)
