"""Fixtures of the fault, fuzz and live-server tests: real PostgreSQL, real Redis, real servers.

A service that cannot be reached skips its tests locally and fails them with ``CI=true``.
Destructive tests (stopping PostgreSQL or Redis) use private servers on free ports
(:class:`live_stack.PrivatePostgres`, :class:`live_stack.PrivateRedis`), never the shared ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from live_stack import (
    LiveServer,
    PrivatePostgres,
    PrivateRedis,
    ServiceUnavailable,
    lora_adapter,
    postgres_database,
    redis_database,
    service_env,
)


def required(error: Exception) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"required in CI: {error}")
    pytest.skip(str(error))


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, migrated database on the shared PostgreSQL server (dropped afterwards)."""
    try:
        context = postgres_database()
        url = context.__enter__()
    except ServiceUnavailable as error:
        required(error)
    try:
        yield url
    finally:
        context.__exit__(None, None, None)


@pytest.fixture
def redis_url() -> Iterator[str]:
    """An empty database of the shared Redis server (flushed afterwards)."""
    import redis

    try:
        url = redis_database()
    except ServiceUnavailable as error:
        required(error)
    yield url
    redis.Redis.from_url(url).flushdb()


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    try:
        server.start()
    except ServiceUnavailable as error:
        server.destroy()
        required(error)
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    cluster = PrivatePostgres()
    try:
        cluster.init()
        cluster.start()
    except (ServiceUnavailable, OSError) as error:
        cluster.destroy()
        required(ServiceUnavailable(f"private PostgreSQL cluster: {error}"))
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., LiveServer]]:
    """Start ``uvicorn app.main:create_app`` (production mode) on the given registry and broker."""
    servers: list[LiveServer] = []

    def start(database_url: str, broker_url: str, *, workers: int = 1, **extra: str) -> LiveServer:
        data_dir = tmp_path / "data"
        server = LiveServer(
            env=service_env(data_dir, database_url, broker_url, **extra),
            log_path=tmp_path / f"server-{len(servers)}.log",
            workers=workers,
        )
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


# --------------------------------------------------------------------------- tiny artifacts


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny encoder v1 and v2 (same architecture, other weights), a task, a PEFT LoRA on v1."""
    from recycling_core.tiny import make_synthetic_task, make_tiny_model

    root = tmp_path_factory.mktemp("faults-tiny")
    v1 = make_tiny_model(root / "v1", "encoder", seed=0)
    v2 = make_tiny_model(root / "v2", "encoder", seed=1)
    task = make_synthetic_task(root / "task", n_train=48, n_dev=12, n_test=12, num_labels=3)
    labels = json.loads((task / "task.json").read_text())["labels"]
    return {"v1": v1, "v2": v2, "task": task, "adapter": lora_adapter(v1, root / "lora", labels)}
