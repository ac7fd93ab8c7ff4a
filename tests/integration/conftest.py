"""Integration fixtures: a real Celery worker subprocess beside the API, on a real broker.

Two stacks: the embedded one (SQLite registry, kombu's SQLAlchemy transport on a SQLite broker
file) and the production one (PostgreSQL + Redis). A stack whose servers cannot be reached is
skipped locally and fails the run when ``CI=true``. The API runs in this process (TestClient,
lifespan included: migrations and the reaper); the worker is ``celery -A workers.celery_app
worker`` started with ``RECYCLE_*`` variables pointing at the same registry, broker and
artifact directory.
"""

from __future__ import annotations

import json
import os
import random
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from worker_helpers import Stack, build_lora_adapter

from app.main import create_app

POSTGRES_ADMIN_URL = os.environ.get(
    "RECYCLE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("RECYCLE_TEST_REDIS_URL", "redis://127.0.0.1:6379")


def _unavailable(what: str, reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} is required in CI: {reason}")
    pytest.skip(f"{what} unreachable: {reason}")


# --------------------------------------------------------------------------- stacks


def _sqlite_stack(tmp_path: Path) -> Stack:
    data_dir = tmp_path / "data"
    return Stack(
        name="sqlite",
        data_dir=data_dir,
        database_url=f"sqlite:///{data_dir / 'registry.sqlite'}",
        broker_url=f"sqla+sqlite:///{data_dir / 'broker.sqlite'}",
    )


def _production_stack(tmp_path: Path) -> Iterator[Stack]:
    import redis

    try:
        admin = sa.create_engine(
            POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3}
        )
        with admin.connect() as connection:
            connection.exec_driver_sql("SELECT 1")
    except sa.exc.OperationalError as error:
        _unavailable("PostgreSQL", str(error).splitlines()[0])
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
    try:
        client.ping()
    except redis.exceptions.RedisError as error:
        _unavailable("Redis", str(error))
    # A Redis database of our own: the gpu/cpu queues of other runs must not feed this worker.
    index = next(
        (
            i
            for i in random.sample(range(1, 16), 15)
            if redis.Redis.from_url(f"{REDIS_URL}/{i}").dbsize() == 0
        ),
        None,
    )
    if index is None:
        _unavailable("an empty Redis database", "databases 1-15 are all in use")
    name = f"recycle_integration_{uuid.uuid4().hex[:10]}"
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        yield Stack("postgresql+redis", tmp_path / "data", url, f"{REDIS_URL}/{index}")
    finally:
        redis.Redis.from_url(f"{REDIS_URL}/{index}").flushdb()
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgresql+redis", marks=[pytest.mark.postgres, pytest.mark.redis]),
    ]
)
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    if request.param == "sqlite":
        chosen = _sqlite_stack(tmp_path)
        yield chosen
        chosen.stop_workers()
        return
    generator = _production_stack(tmp_path)
    chosen = next(generator)
    try:
        yield chosen
    finally:
        chosen.stop_workers()
        next(generator, None)


@pytest.fixture
def sqlite_stack(tmp_path: Path) -> Iterator[Stack]:
    chosen = _sqlite_stack(tmp_path)
    yield chosen
    chosen.stop_workers()


@pytest.fixture
def api(stack: Stack) -> Iterator[TestClient]:
    with TestClient(create_app(stack.settings())) as client:
        yield client


# --------------------------------------------------------------------------- tiny artifacts


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny encoder v1, an upgraded v2 (continual pre-training), a task, a plain-PEFT adapter."""
    from recycling_core.tiny import make_corpus, make_synthetic_task, make_tiny_model
    from recycling_core.upgrade import UpgradeConfig, UpgradeRequest, simulate_upgrade

    root = tmp_path_factory.mktemp("integration-tiny")
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
