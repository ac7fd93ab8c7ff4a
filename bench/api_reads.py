"""Registry reads under a paced load of 100 clients (issue 7, target 7): p99 and requests/s.

Starts its own stack on this machine — a fresh database on the PostgreSQL server of
``RECYCLE_TEST_POSTGRES_URL`` (default 127.0.0.1:5432), an empty Redis database as the broker,
and the API in production mode (``uvicorn --factory app.main:create_app`` with ``--workers``
processes, auth on) — seeds a registry over HTTP (models with versions, a task, adapters), then
runs a loopback load generator in a separate process and reports what the clients saw.

The generator is open-loop: each of ``--clients`` keep-alive connections sends one read every
``clients / rate`` seconds (start times staggered), whatever the previous answer's latency. A
request's latency is measured from the time it was *scheduled*, not from when it could be sent,
so a server that falls behind shows its queueing in the percentiles (no coordinated omission).
The reads rotate over the registry's read endpoints with an API key of role ``reader``. It is
a small HTTP/1.1 client on asyncio (uvloop when installed) so that the generator itself takes
little of the two cores; its CPU time, the server's and PostgreSQL's are reported.

    python -m bench.api_reads --out var/api-reads.json                  # 100 clients, 500 req/s, 30 s
    python -m bench.api_reads --rates 300 500 700 --duration 20 --out F  # several offered rates
    python -m bench.api_reads --rates 100 --profile-rate 150 --out F     # and where the CPU goes (py-spy)

Exit status 0 when every request was answered 200 (the target itself is judged in the doc).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "tests" / "faults")]

import httpx  # noqa: E402
from live_stack import (  # noqa: E402
    LiveServer,
    create_api_key,
    postgres_database,
    redis_database,
    service_env,
    wait_until,
)

from bench.load import machine, seed  # noqa: E402

EXTRA_MODELS = 40


def seed_registry(url: str, admin_key: str, workdir: Path) -> list[str]:
    """A registry to read: model ``load`` (v1, v2, a task, an adapter) and 40 more models."""
    seeded = seed(url, admin_key, workdir)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin_key}"}, timeout=60) as client:
        for number in range(EXTRA_MODELS):
            response = client.post("/v1/models", json={"name": f"reads-{number:03d}", "description": "read benchmark"})
            assert response.status_code == 201, response.text
    adapter = seeded["adapter_id"]
    return [
        "/v1/models?limit=20",
        "/v1/models/load",
        "/v1/models/reads-007",
        "/v1/models/load/versions",
        "/v1/models/load/versions/1",
        "/v1/models/load/versions/2",
        "/v1/adapters?limit=20",
        f"/v1/adapters/{adapter}",
        "/v1/tasks?limit=20",
        "/v1/tasks/load-task",
    ]


def listening_sockets(port: int) -> int:
    """Sockets in LISTEN state on a local IPv4 port (one per process with SO_REUSEPORT)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        count += state == "0A" and int(local.split(":")[1], 16) == port
    return count


class ProductionServer(LiveServer):
    """``recycle serve --production --workers N`` (the container's command) in its own process group."""

    def start(self, timeout: float = 120) -> ProductionServer:
        argv = [sys.executable, "-c", "from app.cli import main; main()", "serve", "--production",
                "--port", str(self.port), "--workers", str(self.workers)]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(argv, cwd=REPO_ROOT, env={**os.environ, **self.env}, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)

        def ready() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited:\n{self.logs(4000)}")
            return listening_sockets(self.port) >= self.workers

        wait_until(ready, timeout, "every API process to listen", interval=0.5)
        wait_until(lambda: httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200, 30, "/healthz")
        return self


# ----------------------------------------------------------------------------- the generator


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    if length:
        await reader.readexactly(length)
    return status


async def _client(number: int, port: int, paths: list[str], key: str, start: float, period: float,
                  stop: float, samples: list[tuple[int, float, float, int]]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    requests = [
        (index, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
        for index, path in enumerate(paths)
    ]
    order = random.Random(number)
    scheduled = start + period * order.random()
    loop = asyncio.get_running_loop()
    try:
        while scheduled < stop:
            delay = scheduled - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            index, request = requests[order.randrange(len(requests))]
            writer.write(request)
            try:
                status = await _read_response(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                status = 0
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            samples.append((index, scheduled - start, loop.time() - scheduled, status))
            scheduled += period
    finally:
        writer.close()


async def _generate(port: int, paths: list[str], key: str, clients: int, rate: float, duration: float,
                    warmup: float) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    period = clients / rate
    start = loop.time() + 0.5
    stop = start + warmup + duration
    samples: list[tuple[int, float, float, int]] = []
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    await asyncio.gather(*(_client(n, port, paths, key, start, period, stop, samples) for n in range(clients)))
    usage_after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "samples": samples,
        "generator_cpu_seconds": (usage_after.ru_utime - usage_before.ru_utime) + (usage_after.ru_stime - usage_before.ru_stime),
    }


def _generator_process(port: int, paths: list[str], key: str, clients: int, rate: float, duration: float,
                       warmup: float, connection: Any) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    connection.send(asyncio.run(_generate(port, paths, key, clients, rate, duration, warmup)))


# ----------------------------------------------------------------------------- accounting


def _cpu_seconds(pids: list[int]) -> dict[int, float]:
    """CPU seconds (user + system) used so far by each live process."""
    ticks = os.sysconf("SC_CLK_TCK")
    used = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        used[pid] = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return used


def _cpu_used_since(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two readings; a process started in between counts from zero (one that
    ended in between is lost: PostgreSQL backends live as long as the pool's connections)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def _process_tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, queue = [], [root]
    while queue:
        pid = queue.pop()
        found.append(pid)
        queue.extend(children.get(pid, []))
    return found


def _postgres_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() in ("postgres", "postmaster"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def measure(server: ProductionServer, paths: list[str], key: str, clients: int, rate: float, duration: float,
            warmup: float) -> dict[str, Any]:
    assert server.process is not None
    server_pids = _process_tree(server.process.pid)
    postgres_pids = _postgres_pids()
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    generator = context.Process(target=_generator_process,
                                args=(server.port, paths, key, clients, rate, duration, warmup, sender))
    server_before, postgres_before = _cpu_seconds(server_pids), _cpu_seconds(postgres_pids)
    load_before = os.getloadavg()[0]
    generator.start()
    # The counters cover the whole run, warm-up included; rates are per second of that span.
    started = time.monotonic()
    result = receiver.recv()
    span = time.monotonic() - started
    generator.join()
    server_after = _cpu_seconds(_process_tree(server.process.pid))
    server_cpu = _cpu_used_since(server_before, server_after)
    per_process = sorted((after - server_before.get(pid, 0.0)) / span for pid, after in server_after.items())
    postgres_cpu = _cpu_used_since(postgres_before, _cpu_seconds(_postgres_pids()))
    samples = result["samples"]
    counted = [s for s in samples if s[1] >= warmup]
    latencies = sorted(s[2] * 1000 for s in counted)
    errors = sum(1 for s in counted if s[3] != 200)
    per_path = {}
    for index, path in enumerate(paths):
        own = sorted(s[2] * 1000 for s in counted if s[0] == index)
        per_path[path] = {"requests": len(own), "p50_ms": round(_percentile(own, 0.5), 2), "p99_ms": round(_percentile(own, 0.99), 2)}
    answered = len(samples)
    return {
        "clients": clients,
        "offered_rps": rate,
        "duration_seconds": duration,
        "warmup_seconds": warmup,
        "requests_counted": len(counted),
        # answered per second over the span in which the counted requests were answered (an
        # overloaded server answers them long after the offered span has ended)
        "achieved_rps": round(len(counted) / max(duration, max(s[1] + s[2] for s in counted) - warmup), 1) if counted else 0.0,
        "errors": errors,
        "p50_ms": round(_percentile(latencies, 0.50), 2),
        "p90_ms": round(_percentile(latencies, 0.90), 2),
        "p99_ms": round(_percentile(latencies, 0.99), 2),
        "max_ms": round(latencies[-1], 2) if latencies else None,
        "cpu_ms_per_request": {
            "server": round(1000 * server_cpu / answered, 3) if answered else None,
            "postgres": round(1000 * postgres_cpu / answered, 3) if answered else None,
            "generator": round(1000 * result["generator_cpu_seconds"] / answered, 3) if answered else None,
        },
        "cpu_cores_busy": {
            "server": round(server_cpu / span, 2),
            "postgres": round(postgres_cpu / span, 2),
            "generator": round(result["generator_cpu_seconds"] / span, 2),
        },
        "server_cores_busy_per_process": [round(value, 2) for value in per_process if value >= 0.01],
        "loadavg_1m_before": round(load_before, 2),
        "per_path": per_path,
    }


PROFILE_CATEGORIES = (
    ("database driver (psycopg)", ("psycopg",)),
    ("ORM and SQL compilation (sqlalchemy)", ("sqlalchemy",)),
    ("validation and serialisation (pydantic)", ("pydantic",)),
    ("FastAPI (routing, dependencies)", ("fastapi",)),
    ("Starlette and uvicorn (HTTP, middleware plumbing)", ("starlette", "uvicorn", "httptools", "h11")),
    ("thread hand-offs (anyio, threading, asyncio)", ("anyio", "threading.py", "asyncio", "selectors.py", "queue.py", "concurrent")),
    ("logging", ("logging",)),
    ("this service (app/)", ("app/",)),
)


def _category(frame: str) -> str:
    location = frame[frame.rfind("(") + 1:]
    for name, needles in PROFILE_CATEGORIES:
        if any(needle in location for needle in needles):
            return name
    return "other"


def profile_workers(server: ProductionServer, paths: list[str], key: str, clients: int, rate: float,
                    seconds: float, out_dir: Path) -> dict[str, Any]:
    """Sample every API process with py-spy while serving ``rate``: only threads holding the GIL,
    i.e. where the processes spend their Python CPU time."""
    import shutil

    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    assert server.process is not None
    workers = [pid for pid in _process_tree(server.process.pid) if pid != server.process.pid]
    recorders = []
    for pid in workers:
        raw = out_dir / f"py-spy-{pid}.txt"
        recorders.append((raw, subprocess.Popen([spy, "record", "--pid", str(pid), "--duration", str(int(seconds)),
                                                 "--rate", "100", "--gil", "--format", "raw", "--output", str(raw)],
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
    run = measure(server, paths, key, clients, rate, seconds, 2.0)
    by_category: dict[str, int] = {}
    leaves: dict[str, int] = {}
    for raw, recorder in recorders:
        recorder.wait(timeout=seconds + 60)
        if not raw.exists():
            continue
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack:
                continue
            leaf = stack.split(";")[-1]
            kind = _category(leaf)
            by_category[kind] = by_category.get(kind, 0) + int(count)
            leaves[leaf] = leaves.get(leaf, 0) + int(count)
    total = sum(by_category.values()) or 1
    return {
        "rate": rate,
        "seconds": seconds,
        "processes": len(workers),
        "samples": total,
        "share_by_category": {k: round(v / total, 3) for k, v in sorted(by_category.items(), key=lambda item: -item[1])},
        "top_functions": [[name, round(count / total, 3)] for name, count in sorted(leaves.items(), key=lambda item: -item[1])[:20]],
        "run": {k: v for k, v in run.items() if k != "per_path"},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rates", type=float, nargs="+", default=[500.0], help="offered requests/s, one measurement each")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds counted per rate")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds sent before counting starts")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn worker processes")
    parser.add_argument("--profile-rate", type=float, help="after the rates, sample the API processes with py-spy at this rate")
    parser.add_argument("--profile-seconds", type=float, default=15.0)
    parser.add_argument("--pause", type=float, default=10.0, help="idle seconds between measurements")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"command": " ".join(["python -m bench.api_reads", *(argv or sys.argv[1:])]),
                               "machine": machine(), "workers": args.workers, "runs": []}
    with tempfile.TemporaryDirectory(prefix="api-reads-") as root, postgres_database() as database_url:
        workdir = Path(root)
        broker_url = redis_database()
        env = service_env(workdir / "data", database_url, broker_url)
        admin_key = create_api_key(database_url, "admin", "reads-admin")
        reader_key = create_api_key(database_url, "reader", "reads-reader")
        server = ProductionServer(env, workdir / "server.log", args.workers).start()
        try:
            paths = seed_registry(server.url, admin_key, workdir)
            with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {reader_key}"}) as client:
                for path in paths:
                    response = client.get(path)
                    assert response.status_code == 200, f"{path}: {response.status_code} {response.text}"
            results["paths"] = paths
            results["server_port"] = server.port
            for number, rate in enumerate(args.rates):
                if number:
                    time.sleep(args.pause)
                run = measure(server, paths, reader_key, args.clients, rate, args.duration, args.warmup)
                results["runs"].append(run)
                print(json.dumps({k: v for k, v in run.items() if k != "per_path"}), flush=True)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(results, indent=2))
            if args.profile_rate:
                time.sleep(args.pause)
                results["profile"] = profile_workers(server, paths, reader_key, args.clients, args.profile_rate,
                                                     args.profile_seconds, workdir)
                print(json.dumps(results["profile"]["share_by_category"]), flush=True)
                args.out.write_text(json.dumps(results, indent=2))
        finally:
            server.stop()
    return 0 if all(run["errors"] == 0 for run in results["runs"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
