"""Real services for the fault, fuzz and load tests: a uvicorn server in a subprocess, a fresh
PostgreSQL database, a Redis database of our own, and private PostgreSQL / Redis servers on free
ports that a test may stop and restart without disturbing anyone else's tests.

Used by ``tests/faults`` and by the load benchmark (``bench/load.py``); nothing here imports
pytest, so the benchmark can use it on its own. A service that cannot be reached raises
:class:`ServiceUnavailable`; the test fixtures turn that into a skip locally and a failure with
``CI=true``.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import sqlalchemy as sa

REPO_ROOT = Path(__file__).resolve().parents[2]
POSTGRES_ADMIN_URL = os.environ.get(
    "RECYCLE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("RECYCLE_TEST_REDIS_URL", "redis://127.0.0.1:6379")


class ServiceUnavailable(RuntimeError):
    """PostgreSQL, Redis or a server binary the test needs is not there."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(condition, timeout: float, what: str, interval: float = 0.2):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# --------------------------------------------------------------------------- PostgreSQL


@contextmanager
def postgres_database(
    admin_url: str = POSTGRES_ADMIN_URL, *, migrate: bool = True
) -> Iterator[str]:
    """A new database on the PostgreSQL server of ``admin_url``, migrated to head, then dropped."""
    admin = sa.create_engine(
        admin_url,
        isolation_level="AUTOCOMMIT",
        connect_args={"connect_timeout": 3},
        poolclass=sa.pool.NullPool,  # the server may have been restarted in between
    )
    name = f"recycle_faults_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except sa.exc.OperationalError as error:
        admin.dispose()
        raise ServiceUnavailable(f"PostgreSQL: {str(error).splitlines()[0]}") from error
    url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        if migrate:
            from app.db.migrate import upgrade_to_head

            upgrade_to_head(url)
        yield url
    finally:
        try:
            with admin.connect() as connection:
                connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            admin.dispose()


def _pg_bin(name: str) -> str:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if found:
        return str(found[-1])
    located = shutil.which(name)
    if located is None:
        raise ServiceUnavailable(f"PostgreSQL server binary {name} is not installed")
    return located


@dataclass
class PrivatePostgres:
    """A throw-away PostgreSQL cluster on a free port (initdb in a temporary directory).

    Stopping and starting it disturbs nobody else. As root the cluster runs as ``postgres``.
    """

    port: int = field(default_factory=free_port)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="recycle-pg-")))

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = list(argv)
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, check=check, capture_output=True, text=True, timeout=120)

    def init(self) -> PrivatePostgres:
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self._run(
            _pg_bin("initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
        )
        return self

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=200"
        )
        self._run(
            _pg_bin("pg_ctl"),
            "-D",
            str(self.data_dir),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run(
            _pg_bin("pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "stop", check=False
        )

    def is_up(self) -> bool:
        with socket.socket() as probe:
            probe.settimeout(0.5)
            return probe.connect_ex(("127.0.0.1", self.port)) == 0

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


# --------------------------------------------------------------------------- Redis


def redis_database(base_url: str = REDIS_URL) -> str:
    """The URL of an empty database (1-15) of the shared Redis: no other run's queues."""
    import redis

    try:
        redis.Redis.from_url(base_url, socket_connect_timeout=3).ping()
    except redis.exceptions.RedisError as error:
        raise ServiceUnavailable(f"Redis: {error}") from error
    for index in random.sample(range(1, 16), 15):
        if redis.Redis.from_url(f"{base_url}/{index}").dbsize() == 0:
            return f"{base_url}/{index}"
    raise ServiceUnavailable("Redis: databases 1-15 are all in use")


@dataclass
class PrivateRedis:
    """A redis-server of our own on a free port, without persistence (like the CI one)."""

    port: int = field(default_factory=free_port)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="recycle-redis-")))
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ServiceUnavailable("redis-server is not installed")
        log = open(self.root / "redis.log", "ab")  # noqa: SIM115  (closed below)
        self.process = subprocess.Popen(
            [
                binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.root),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_until(self.is_up, 20, f"redis-server on port {self.port}")

    def is_up(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.port, socket_connect_timeout=0.5).ping())
        except redis.exceptions.RedisError:
            return False

    def stop(self) -> None:
        """Like a crash of a server without persistence: every queued message is gone."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=20)
        self.process = None

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


# --------------------------------------------------------------------------- the API server


@dataclass
class LiveServer:
    """``uvicorn --factory app.main:create_app`` in its own process group, logging to a file."""

    env: dict[str, str]
    log_path: Path
    workers: int = 1
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90) -> LiveServer:
        argv = [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "app.main:create_app",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--log-level",
            "warning",
            "--workers",
            str(self.workers),
        ]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv,
                cwd=REPO_ROOT,
                env={**os.environ, **self.env, "PYTHONUNBUFFERED": "1"},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def healthy() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited:\n{self.logs()}")
            try:
                return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, timeout, "the API server to answer /healthz", interval=0.3)
        return self

    def logs(self, tail: int = 6000) -> str:
        return self.log_path.read_text(errors="replace")[-tail:] if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        self.process = None


def service_env(data_dir: Path, database_url: str, broker_url: str, **extra: str) -> dict[str, str]:
    """``RECYCLE_*`` variables of a production-mode server (auth on, server-side paths off)."""
    return {
        "RECYCLE_ENVIRONMENT": "production",
        "RECYCLE_DATA_DIR": str(data_dir),
        "RECYCLE_DATABASE_URL": database_url,
        "RECYCLE_BROKER_URL": broker_url,
        "RECYCLE_ARTIFACT_ROOT": str(data_dir / "artifacts"),
        "RECYCLE_RUN_MIGRATIONS_ON_STARTUP": "false",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **extra,
    }


def create_api_key(database_url: str, role: str = "admin", name: str | None = None) -> str:
    """An API key written straight into the registry (what ``recycle keys create`` does)."""
    from app.auth.service import create_key
    from app.db.session import create_db_engine, create_session_factory, transaction

    engine = create_db_engine(database_url)
    try:
        with transaction(create_session_factory(engine)) as session:
            return create_key(session, name or f"faults-{role}", role).secret
    finally:
        engine.dispose()


def start_worker(
    env: dict[str, str], log_path: Path, name: str = "w1", queues: str = "gpu,cpu"
) -> subprocess.Popen[bytes]:
    """A real Celery worker (``celery -A workers.celery_app worker``) in its own process group."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "workers.celery_app",
                "worker",
                "-Q",
                queues,
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
            env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_process(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        os.killpg(process.pid, sig)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


# --------------------------------------------------------------------------- artifacts


def lora_adapter(base_dir: Path, out_dir: Path, labels: list[str]) -> Path:
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


def split_files(task_dir: Path) -> dict[str, tuple[str, bytes, str]]:
    return {
        split: (f"{split}.jsonl", (task_dir / f"{split}.jsonl").read_bytes(), "application/jsonl")
        for split in ("train", "dev", "test")
    }


def task_labels(task_dir: Path) -> str:
    """The task's labels in id order, as the JSON form field ``labels``."""
    return json.dumps(json.loads((task_dir / "task.json").read_text())["labels"])
