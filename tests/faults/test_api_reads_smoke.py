"""A small run of the read benchmark (``bench/api_reads.py``) so CI keeps it working.

It starts ``recycle serve --production --workers 2`` (one socket per process, SO_REUSEPORT) on
the real PostgreSQL and Redis, seeds a registry and sends 30 paced reads per second from 20
clients for 3 seconds. Required: every read answered 200 by both API processes' port, the
benchmark's exit status 0, and no API process left behind. No latency is asserted (numbers
come from the full run, docs/benchmarks/performance.md).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from live_stack import REPO_ROOT

from bench.api_reads import listening_sockets

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(400)]


def test_read_benchmark_smoke_run(pg_url, redis_url, tmp_path):  # type: ignore[no-untyped-def]
    out = tmp_path / "reads.json"
    command = [sys.executable, "-m", "bench.api_reads", "--clients", "20", "--rates", "30", "--duration", "3",
               "--warmup", "1", "--workers", "2", "--out", str(out)]  # fmt: skip
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=360, check=False)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-6000:]
    report = json.loads(out.read_text())
    (run,) = report["runs"]
    assert run["errors"] == 0 and run["requests_counted"] >= 80
    assert all(stats["requests"] > 0 for stats in run["per_path"].values())
    assert len(run["server_cores_busy_per_process"]) >= 2  # both API processes answered
    assert listening_sockets(report["server_port"]) == 0  # every API process stopped
