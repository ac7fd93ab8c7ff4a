"""Schemathesis fuzzes every operation of the service's own OpenAPI document on a running server.

The server is ``uvicorn app.main:create_app`` in production mode on a fresh PostgreSQL database
with a Redis broker, called with an admin key. Checks: no 5xx (``not_a_server_error``) and every
documented response matches its schema (``response_schema_conformance``, error bodies included).

CI runs a bounded pass: the ``examples`` and ``fuzzing`` phases, ``RECYCLE_FUZZ_MAX_EXAMPLES``
(default 20) cases per operation, fixed seed (about a minute). The longer run behind
``docs/reliability.md`` adds the ``coverage`` phase (boundary values of every parameter)::

    RECYCLE_FUZZ_MAX_EXAMPLES=200 RECYCLE_FUZZ_PHASES=examples,coverage,fuzzing \
        RECYCLE_FUZZ_RECORD=docs/fuzz-run.txt scripts/test.sh tests/faults/test_fuzz_openapi.py -s

``DELETE /v1/keys/{key_id}`` is left out: fuzzing it revokes the fuzzer's own key (401 for the
rest of the run); ``tests/service/test_auth.py`` covers it.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys

import httpx
import pytest
from live_stack import create_api_key, split_files, tar_gz, task_labels

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(1800)]

MAX_EXAMPLES = int(os.environ.get("RECYCLE_FUZZ_MAX_EXAMPLES", "20"))
PHASES = os.environ.get("RECYCLE_FUZZ_PHASES", "examples,fuzzing")
SEED = int(os.environ.get("RECYCLE_FUZZ_SEED", "20261126"))


def _seed_registry(url: str, key: str, tiny) -> None:  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        assert client.post("/v1/models", json={"name": "fuzz"}).status_code == 201
        version = client.post(
            "/v1/models/fuzz/versions",
            files={"file": ("v1.tar.gz", tar_gz(tiny["v1"]), "application/gzip")},
        )
        assert version.status_code == 201, version.text
        task = client.post(
            "/v1/tasks",
            data={"name": "topics", "labels": task_labels(tiny["task"])},
            files=split_files(tiny["task"]),
        )
        assert task.status_code == 201, task.text
        adapter = client.post(
            "/v1/adapters",
            data={"model": "fuzz", "version": "1", "task": "topics"},
            files={"file": ("a.tar.gz", tar_gz(tiny["adapter"]), "application/gzip")},
        )
        assert adapter.status_code == 201, adapter.text


def test_schemathesis_finds_no_server_error_or_schema_violation(
    pg_url, redis_url, start_server, tiny, tmp_path
):  # type: ignore[no-untyped-def]
    server = start_server(pg_url, redis_url, workers=1)
    key = create_api_key(pg_url, "admin", "fuzzer")
    _seed_registry(server.url, key, tiny)
    report_dir = tmp_path / "schemathesis"
    argv = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{server.url}/openapi.json",
        "--checks",
        "not_a_server_error,response_schema_conformance",
        "--header",
        f"Authorization: Bearer {key}",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--workers",
        "2",
        "--request-timeout",
        "30",
        "--exclude-name",
        "DELETE /v1/keys/{key_id}",
        "--phases",
        PHASES,
        "--suppress-health-check",
        "all",
        "--report",
        "junit",
        "--report-dir",
        str(report_dir),
        "--output-truncate",
        "false",
        "--no-color",
    ]
    started = dt.datetime.now(dt.UTC)
    result = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=1700)
    output = result.stdout + result.stderr
    summary = _summary(output)
    record = os.environ.get("RECYCLE_FUZZ_RECORD")
    if record:
        with open(record, "w") as handle:
            handle.write(
                f"# schemathesis run {started:%Y-%m-%d %H:%M} UTC, max-examples {MAX_EXAMPLES}, "
                f"seed {SEED}, phases {PHASES}, {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}"
                f"\n{summary}\n"
            )
    print(output[-6000:])
    assert "Traceback" not in server.logs(), server.logs()
    assert "Failures:" not in output, output[-20000:] + "\n--- server log\n" + server.logs()
    if result.returncode != 0:
        # Schemathesis reports crashes of its own data generation (Hypothesis internals) as
        # errors; only those may make it exit non-zero without a failure of the service.
        assert _only_tool_errors(output), output[-20000:]


def _only_tool_errors(output: str) -> bool:
    errors = output.split("ERRORS", 1)[-1].split("SUMMARY", 1)[0] if "ERRORS" in output else ""
    blocks = [block for block in errors.split("Runtime Error")[1:] if block.strip()]
    return bool(blocks) and all("site-packages/hypothesis/" in block for block in blocks)


def _summary(output: str) -> str:
    """The closing SUMMARY block of the CLI output: operations, phases, failures, test cases."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if "SUMMARY" in line), max(len(lines) - 40, 0))
    return "\n".join(line.rstrip() for line in lines[start : start + 60])
