"""Load benchmark: locust (headless) against the API on PostgreSQL with a Redis broker.

Starts its own stack on this machine: a fresh database on the PostgreSQL server of
``RECYCLE_TEST_POSTGRES_URL`` (default 127.0.0.1:5432), an empty Redis database, and
``uvicorn app.main:create_app`` with ``--workers`` processes in production mode. Seeds one model
(v1, v2), a task and an adapter, then runs ``bench/locustfile.py`` with ``--users`` concurrent
clients until ``--requests`` requests were answered: reads, registrations (models, API keys,
tasks with their files) and job submissions. No worker runs, so submitted jobs wait QUEUED with
their message in Redis.

Then it checks that nothing was lost: every acknowledged model, key, task and job has its row
(and nothing unacknowledged does); every task row has its artifact directory with matching
sha256s and no directory lacks a row; every job has exactly one message in the broker queue.
Zero errors are required. It prints and writes (``--out``) the counts and latencies (p50, p99
per request type and overall) with the machine (``nproc``, CPU model, date).

    python bench/load.py                                # 50 clients, 10,000 requests
    python bench/load.py --users 5 --requests 300 --workers 1   # the CI smoke run

Exit status 0 only when there were no errors and nothing was lost.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "tests" / "faults")]

import httpx
import redis
import sqlalchemy as sa
from live_stack import (
    LiveServer,
    create_api_key,
    lora_adapter,
    postgres_database,
    redis_database,
    service_env,
    split_files,
    tar_gz,
    task_labels,
)


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg_1m_at_start": round(os.getloadavg()[0], 2),  # the cores are shared
    }


def seed(url: str, key: str, workdir: Path) -> dict[str, Any]:
    """Model ``load`` v1 and v2, task ``load-task``, a LoRA adapter on v1 (over HTTP)."""
    from recycling_core.tiny import make_synthetic_task, make_tiny_model

    v1 = make_tiny_model(workdir / "v1", "encoder", seed=0)
    v2 = make_tiny_model(workdir / "v2", "encoder", seed=1)
    task = make_synthetic_task(workdir / "task", n_train=24, n_dev=6, n_test=6, num_labels=3)
    adapter = lora_adapter(v1, workdir / "lora", json.loads(task_labels(task)))
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as c:
        assert c.post("/v1/models", json={"name": "load"}).status_code == 201
        for directory, data in ((v1, {}), (v2, {"parent_version": "1"})):
            response = c.post(
                "/v1/models/load/versions",
                data=data,
                files={"file": ("m.tar.gz", tar_gz(directory), "application/gzip")},
            )
            assert response.status_code == 201, response.text
        second = response.json()
        response = c.post(
            "/v1/tasks",
            data={"name": "load-task", "labels": task_labels(task)},
            files=split_files(task),
        )
        assert response.status_code == 201, response.text
        response = c.post(
            "/v1/adapters",
            data={"model": "load", "version": "1", "task": "load-task"},
            files={"file": ("a.tar.gz", tar_gz(adapter), "application/gzip")},
        )
        assert response.status_code == 201, response.text
        # Registering v2 may start an automatic campaign; its jobs count as seeded, not sent.
        return {"adapter_id": response.json()["id"], "to_version_id": second["id"]}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def latency_table(timings: list[list[Any]], elapsed: float) -> list[dict[str, Any]]:
    """Requests, failures, p50/p99/max (ms, exact from every request) per request type and ALL."""
    groups: dict[str, list[list[Any]]] = {}
    for row in timings:
        groups.setdefault(row[0], []).append(row)
    rows = []
    for name, items in [*sorted(groups.items()), ("ALL", timings)]:
        times = [item[1] for item in items]
        rows.append(
            {
                "name": name,
                "requests": len(items),
                "failures": sum(1 for item in items if item[2]),
                "p50_ms": _percentile(times, 0.50),
                "p99_ms": _percentile(times, 0.99),
                "max_ms": round(max(times, default=0.0), 1),
                "rps": round(len(items) / elapsed, 1) if elapsed else 0.0,
            }
        )
    return rows


def verify(
    database_url: str,
    broker_url: str,
    artifact_root: Path,
    record: dict[str, list[str]],
    seeded_jobs: set[str],
) -> dict[str, Any]:
    """Rows and artifacts against what the server acknowledged."""
    engine = sa.create_engine(database_url)
    with engine.connect() as connection:

        def names(table: str, prefix: str) -> set[str]:
            query = sa.text(f"SELECT name FROM {table} WHERE name LIKE :prefix")
            return set(connection.execute(query, {"prefix": f"{prefix}%"}).scalars())

        models = names("models", "load-m-")
        keys = names("api_keys", "load-k-")
        tasks = connection.execute(
            sa.text("SELECT name, artifact_uri, manifest FROM tasks WHERE name LIKE 'load-t-%'")
        ).all()
        jobs = set(connection.execute(sa.text("SELECT id FROM jobs")).scalars()) - seeded_jobs
    engine.dispose()
    problems: list[str] = []
    for kind, rows in (("models", models), ("keys", keys), ("tasks", {t.name for t in tasks})):
        sent = set(record[kind])
        if rows != sent:
            problems.append(
                f"{kind}: {len(sent - rows)} acknowledged without a row, "
                f"{len(rows - sent)} rows never acknowledged"
            )
    if jobs != set(record["jobs"]):
        problems.append(f"jobs: rows {len(jobs)} != acknowledged {len(record['jobs'])}")
    # Every task row has its files (sha256 as recorded); no stored task directory lacks a row.
    task_root = artifact_root / "tasks"
    stored_dirs = {p.parent.name for p in task_root.glob("load-t-*/*") if p.is_dir()}
    for row in tasks:
        directory = Path(row.artifact_uri.removeprefix("file://"))
        files = {
            p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in directory.rglob("*")
            if p.is_file()
        }
        if files != row.manifest:
            problems.append(f"task {row.name}: stored files differ from its manifest")
    if stored_dirs != {t.name for t in tasks}:
        problems.append(f"task artifacts: {len(stored_dirs)} directories for {len(tasks)} rows")
    leftovers = [p for p in artifact_root.rglob("*") if ".tmp-" in p.name]
    if leftovers:
        problems.append(f"{len(leftovers)} staging leftovers in the artifact store")
    queued_messages = redis.Redis.from_url(broker_url).llen("cpu")
    if queued_messages != len(record["jobs"]) + len(seeded_jobs):
        problems.append(
            f"broker: {queued_messages} messages in 'cpu' for "
            f"{len(record['jobs']) + len(seeded_jobs)} QUEUED jobs"
        )
    return {
        "models": len(models),
        "keys": len(keys),
        "tasks": len(tasks),
        "task_artifact_dirs": len(stored_dirs),
        "jobs": len(jobs),
        "broker_messages": queued_messages,
        "problems": problems,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2, help="uvicorn worker processes")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    parser.add_argument("--time-limit", default="15m", help="locust --run-time cap")
    args = parser.parse_args(argv)

    host = machine()
    workdir = Path(tempfile.mkdtemp(prefix="recycle-load-"))
    data_dir = workdir / "data"
    broker_url = redis_database()
    with postgres_database() as database_url:
        server = LiveServer(
            env=service_env(data_dir, database_url, broker_url),
            log_path=workdir / "server.log",
            workers=args.workers,
        )
        server.start()
        try:
            key = create_api_key(database_url, "admin", "load-driver")
            ids = seed(server.url, key, workdir)
            engine = sa.create_engine(database_url)
            with engine.connect() as connection:
                seeded_jobs = set(connection.execute(sa.text("SELECT id FROM jobs")).scalars())
            engine.dispose()
            record_path = workdir / "record.json"
            env = {
                **os.environ,
                "LOAD_API_KEY": key,
                "LOAD_MAX_REQUESTS": str(args.requests),
                "LOAD_RECORD": str(record_path),
                "LOAD_ADAPTER_ID": ids["adapter_id"],
                "LOAD_TO_VERSION_ID": str(ids["to_version_id"]),
            }
            started = time.monotonic()
            locust = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "locust",
                    "-f",
                    str(REPO_ROOT / "bench" / "locustfile.py"),
                    "--headless",
                    "--users",
                    str(args.users),
                    "--spawn-rate",
                    str(args.users),
                    "--host",
                    server.url,
                    "--run-time",
                    args.time_limit,
                    "--stop-timeout",
                    "60",
                    "--csv",
                    str(workdir / "locust"),
                    "--only-summary",
                    "--loglevel",
                    "WARNING",
                    "--exit-code-on-error",
                    "0",
                ],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            elapsed = time.monotonic() - started
            if locust.returncode != 0 or not record_path.exists():
                print(locust.stdout[-4000:], locust.stderr[-4000:], file=sys.stderr)
                return 2
            recorded = json.loads(record_path.read_text())
            record = recorded["acknowledged"]
            table = latency_table(recorded["timings"], elapsed)
            totals = next(row for row in table if row["name"] == "ALL")
            checks = verify(database_url, broker_url, data_dir / "artifacts", record, seeded_jobs)
            errors_in_log = server.logs(10**6).count("unhandled error")
        finally:
            server.stop()
            redis.Redis.from_url(broker_url).flushdb()
    result = {
        "machine": host,
        "setup": {
            "users": args.users,
            "requested": args.requests,
            "uvicorn_workers": args.workers,
            "database": "PostgreSQL (fresh database)",
            "broker": "Redis",
        },
        "elapsed_seconds": round(elapsed, 1),
        "totals": totals,
        "by_request": [row for row in table if row["name"] != "ALL"],
        "acknowledged": {kind: len(values) for kind, values in record.items()},
        "stored": checks,
        "server_unhandled_errors": errors_in_log,
    }
    ok = totals["failures"] == 0 and not checks["problems"] and errors_in_log == 0
    result["ok"] = ok
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
