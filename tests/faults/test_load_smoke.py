"""A small run of the load benchmark (``bench/load.py``) so CI keeps it working.

The full benchmark (50 clients, 10,000 requests) is a command, not a test; its numbers live in
docs/reliability.md. This runs 8 clients for 400 requests and requires what the full run does:
zero errors and nothing lost (rows, task artifacts and broker messages match what was sent).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from live_stack import REPO_ROOT

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(600)]


def test_load_benchmark_smoke_run(pg_url, redis_url, tmp_path):  # type: ignore[no-untyped-def]
    """(``pg_url`` and ``redis_url`` only prove the servers are there: skip or fail early.)"""
    out = tmp_path / "load.json"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "bench" / "load.py"),
            "--users",
            "8",
            "--requests",
            "400",
            "--workers",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-6000:]
    report = json.loads(out.read_text())
    assert report["ok"] and report["totals"]["failures"] == 0
    assert report["totals"]["requests"] >= 390
    assert report["stored"]["problems"] == []
    assert report["stored"]["jobs"] == report["acknowledged"]["jobs"] > 0
