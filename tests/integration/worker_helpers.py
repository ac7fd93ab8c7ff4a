"""Helpers of the integration tests: the stack a worker runs on, HTTP registration, polling."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from app.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]

ENGINE_ENV = {
    "RECYCLE_AUTH_REQUIRED": "false",
    "RECYCLE_PROGRESS_THROTTLE_SECONDS": "0.2",
    "RECYCLE_HEARTBEAT_SECONDS": "1",
    "RECYCLE_WORKER_LOST_SECONDS": "6",
    "RECYCLE_REAPER_INTERVAL_SECONDS": "1",
    "RECYCLE_JOB_RETRY_BACKOFF_SECONDS": "1",
}


def _unavailable(what: str, reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} is required in CI: {reason}")
    pytest.skip(f"{what} unreachable: {reason}")


# --------------------------------------------------------------------------- stacks


@dataclass
class Stack:
    """Where the registry, the broker and the artifacts of one test live."""

    name: str
    data_dir: Path
    database_url: str
    broker_url: str
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return {
            **ENGINE_ENV,
            "RECYCLE_DATA_DIR": str(self.data_dir),
            "RECYCLE_DATABASE_URL": self.database_url,
            "RECYCLE_BROKER_URL": self.broker_url,
            "RECYCLE_ARTIFACT_ROOT": str(self.data_dir / "artifacts"),
        }

    def settings(self) -> Settings:
        return Settings(
            data_dir=self.data_dir,
            database_url=self.database_url,
            broker_url=self.broker_url,
            artifact_root=str(self.data_dir / "artifacts"),
            auth_required=False,
            run_migrations_on_startup=True,
            progress_throttle_seconds=0.2,
            heartbeat_seconds=1,
            worker_lost_seconds=6,
            reaper_interval_seconds=1,
            job_retry_backoff_seconds=1,
        )

    def start_worker(self, name: str = "w1") -> subprocess.Popen[bytes]:
        """``celery -A workers.celery_app worker`` in its own process group, logging to a file."""
        log = open(self.data_dir / f"worker-{name}.log", "ab")  # noqa: SIM115  (closed with the process)
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "workers.celery_app",
                "worker",
                "-Q",
                "gpu,cpu",
                "--pool",
                "threads",
                "--concurrency",
                "1",
                "-l",
                "info",
                "-n",
                f"{name}-{uuid.uuid4().hex[:6]}@%h",
                "--without-gossip",
                "--without-mingle",
            ],
            cwd=REPO_ROOT,
            env={**os.environ, **self.env, "PYTHONUNBUFFERED": "1"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.workers.append(process)
        return process

    def kill(self, process: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        if process.poll() is None:
            os.killpg(process.pid, sig)
        process.wait(timeout=30)

    def stop_workers(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.workers:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill(process)

    def worker_logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n" + path.read_text(errors="replace")[-6000:]
            for path in sorted(self.data_dir.glob("worker-*.log"))
        )


def build_lora_adapter(base_dir: Path, out_dir: Path, labels: list[str]) -> Path:
    """An adapter made by plain PEFT (not by our code), with its label2id.json."""
    import peft
    import torch
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(0)
    base = AutoModelForSequenceClassification.from_pretrained(base_dir, num_labels=len(labels))
    model = peft.get_peft_model(
        base, peft.LoraConfig(task_type="SEQ_CLS", r=4, target_modules=["query", "value"])
    )
    model.save_pretrained(out_dir)
    (out_dir / "label2id.json").write_text(json.dumps({label: i for i, label in enumerate(labels)}))
    return out_dir


def tar_gz(directory: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                archive.add(path, arcname=f"bundle/{path.relative_to(directory).as_posix()}")
    return buffer.getvalue()


def register_basics(api: TestClient, tiny: dict[str, Path]) -> dict[str, Any]:
    """Model ``tiny`` v1, task ``topics`` and the plain-PEFT adapter on v1, over HTTP."""
    assert api.post("/v1/models", json={"name": "tiny"}).status_code == 201
    v1 = api.post(
        "/v1/models/tiny/versions",
        files={"file": ("v1.tar.gz", tar_gz(tiny["v1"]), "application/gzip")},
    )
    assert v1.status_code == 201, v1.text
    labels = json.loads((tiny["task"] / "task.json").read_text())["labels"]
    files = {
        s: (f"{s}.jsonl", (tiny["task"] / f"{s}.jsonl").read_bytes(), "application/jsonl")
        for s in ("train", "dev", "test")
    }
    task = api.post("/v1/tasks", data={"name": "topics", "labels": json.dumps(labels)}, files=files)
    assert task.status_code == 201, task.text
    adapter = api.post(
        "/v1/adapters",
        data={"model": "tiny", "version": "1", "task": "topics"},
        files={"file": ("adapter.tar.gz", tar_gz(tiny["adapter"]), "application/gzip")},
    )
    assert adapter.status_code == 201, adapter.text
    return {"v1": v1.json(), "task": task.json(), "adapter": adapter.json()}


def register_v2(api: TestClient, tiny: dict[str, Path]) -> dict[str, Any]:
    response = api.post(
        "/v1/models/tiny/versions",
        data={"parent_version": "1"},
        files={"file": ("v2.tar.gz", tar_gz(tiny["v2"]), "application/gzip")},
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def wait_for(
    condition: Callable[[], Any], timeout: float, what: str, stack: Stack, interval: float = 0.5
) -> Any:
    """Poll until ``condition()`` is truthy; on timeout fail with the worker logs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        for process in stack.workers:
            if process.poll() not in (None, -signal.SIGKILL):
                pytest.fail(
                    f"worker exited with {process.returncode} while waiting for {what}\n"
                    + stack.worker_logs()
                )
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\n{stack.worker_logs()}")
