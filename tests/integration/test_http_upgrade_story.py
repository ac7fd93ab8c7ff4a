"""Issue acceptance: an outside script that speaks only HTTP runs the whole upgrade story against
a real ``recycle serve`` process (embedded mode: uvicorn, SQLite registry, SQLite broker and the
worker subprocess the command starts), then reproduces the reported accuracy with plain PEFT."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.http_upgrade_story import run
from tests.integration.worker_helpers import REPO_ROOT


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    data_dir = tmp_path / "service"
    port = _free_port()
    log_path = tmp_path / "serve.log"
    env = {
        **os.environ,
        "RECYCLE_PROGRESS_THROTTLE_SECONDS": "0.2",
        "RECYCLE_REAPER_INTERVAL_SECONDS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--data-dir", str(data_dir)],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, log_path.read_text()[-4000:]
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "service not ready:\n" + log_path.read_text()[-4000:]
            time.sleep(0.5)
        yield url, (data_dir / "admin-key").read_text().strip(), log_path
    finally:
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)


def test_http_only_upgrade_story_reproduces_reported_accuracy(
    served: tuple[str, str, Path], tiny: dict[str, Path], tmp_path: Path
) -> None:
    url, api_key, log_path = served
    assert httpx.get(f"{url}/v1/models").status_code == 401  # the key is needed
    try:
        result = run(url, api_key, tiny["v1"], tiny["v2"], tiny["task"], tiny["adapter"], tmp_path, timeout=300)
    except AssertionError:
        print(log_path.read_text()[-8000:])
        raise
    n_test = len((tiny["task"] / "test.jsonl").read_text().splitlines())
    assert abs(result["reproduced"] - result["reported"]) < 0.5 / n_test, result
    assert (Path(result["adapter_dir"]) / "adapter_config.json").is_file()
