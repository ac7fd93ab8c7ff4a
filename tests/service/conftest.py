"""Fixtures of the service tests: a fresh database on SQLite and PostgreSQL, an app, tiny models.

SQLite: the schema is migrated once into a template file and each test gets its own copy, so
commits are real. PostgreSQL: a dedicated database is created and migrated once per session;
each test runs inside an outer transaction that is rolled back at the end (requests commit
SAVEPOINTs: ``join_transaction_mode="create_savepoint"``). When PostgreSQL cannot be reached
the PostgreSQL cases are skipped locally and fail when ``CI=true``.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's notice about httpx vs httpx2
    from fastapi.testclient import TestClient

from app.auth.service import create_key
from app.db import Role
from app.db.migrate import upgrade_to_head
from app.db.session import SessionFactory, create_db_engine, create_session_factory, transaction
from app.deps import get_session
from app.main import create_app
from app.settings import Settings
from app.storage import ArtifactStore

POSTGRES_ADMIN_URL = os.environ.get(
    "RECYCLE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def _postgres_unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL is required in CI: {reason}")
    pytest.skip(f"PostgreSQL unreachable: {reason}")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A dedicated, migrated PostgreSQL database for this test session."""
    admin = sa.create_engine(
        POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3}
    )
    name = f"recycle_service_test_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except sa.exc.OperationalError as error:
        admin.dispose()
        _postgres_unavailable(str(error).splitlines()[0])
    url = sa.make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade_to_head(url)
        yield url
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(scope="session")
def postgres_engine(postgres_url: str) -> Iterator[sa.Engine]:
    engine = create_db_engine(postgres_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite registry migrated to head once; tests copy it."""
    path = tmp_path_factory.mktemp("sqlite-template") / "registry.sqlite"
    upgrade_to_head(f"sqlite:///{path}")
    return path


@dataclass
class TestDatabase:
    backend: str
    url: str
    session_factory: SessionFactory

    def session(self) -> sa.orm.Session:
        return self.session_factory()


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestDatabase]:
    """A fresh registry database (per test) on the parametrised backend."""
    if request.param == "sqlite":
        path = tmp_path / "registry.sqlite"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        url = f"sqlite:///{path}"
        engine = create_db_engine(url)
        yield TestDatabase("sqlite", url, create_session_factory(engine))
        engine.dispose()
        return
    engine: sa.Engine = request.getfixturevalue("postgres_engine")
    connection = engine.connect()
    outer = connection.begin()
    factory = sessionmaker(
        bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False
    )
    try:
        yield TestDatabase("postgresql", request.getfixturevalue("postgres_url"), factory)
    finally:
        outer.rollback()
        connection.close()


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    """Override in a test module (or with indirect parametrisation) to change settings."""
    return {}


@pytest.fixture
def settings(db: TestDatabase, tmp_path: Path, settings_overrides: dict[str, object]) -> Settings:
    values: dict[str, object] = {
        "data_dir": tmp_path / "data",
        "database_url": db.url,
        "auth_required": True,
        "run_migrations_on_startup": False,
    }
    values.update(settings_overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
def app(settings: Settings, db: TestDatabase):  # type: ignore[no-untyped-def]
    application = create_app(settings)

    def test_session() -> Iterator[sa.orm.Session]:
        with transaction(db.session_factory) as session:
            yield session

    application.dependency_overrides[get_session] = test_session
    return application


@pytest.fixture
def store(app) -> ArtifactStore:  # type: ignore[no-untyped-def]
    artifact_store: ArtifactStore = app.state.artifact_store
    return artifact_store


@pytest.fixture
def make_key(db: TestDatabase) -> Callable[[Role | str], str]:
    """Create an API key with a role, committed, and return its secret."""

    def create(role: Role | str, name: str | None = None) -> str:
        with transaction(db.session_factory) as session:
            return create_key(session, name or f"test-{role}", role).secret

    return create


@pytest.fixture
def client(app, make_key) -> Iterator[TestClient]:  # type: ignore[no-untyped-def]
    """An HTTP client holding an admin key."""
    secret = make_key(Role.ADMIN, "test-admin")
    with TestClient(app, headers={"Authorization": f"Bearer {secret}"}) as test_client:
        yield test_client


# --------------------------------------------------------------------------- tiny artifacts


@pytest.fixture(scope="session")
def artifacts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny-artifacts")


@pytest.fixture(scope="session")
def tiny_model_dir(artifacts_dir: Path) -> Path:
    from recycling_core.tiny import make_tiny_model

    return make_tiny_model(artifacts_dir / "tiny-encoder-v1", "encoder", seed=0)


@pytest.fixture(scope="session")
def tiny_model_v2_dir(artifacts_dir: Path) -> Path:
    """Same architecture, other weights: an 'upgraded' version."""
    from recycling_core.tiny import make_tiny_model

    return make_tiny_model(artifacts_dir / "tiny-encoder-v2", "encoder", seed=1)


@pytest.fixture(scope="session")
def wide_model_dir(artifacts_dir: Path) -> Path:
    """A different architecture (hidden size 48): adapters of the tiny model do not fit it."""
    from recycling_core.tiny import make_tiny_model

    return make_tiny_model(artifacts_dir / "tiny-encoder-wide", "encoder", seed=0, hidden_size=48)


@pytest.fixture(scope="session")
def task_dir(artifacts_dir: Path) -> Path:
    from recycling_core.tiny import make_synthetic_task

    return make_synthetic_task(
        artifacts_dir / "topics", n_train=40, n_dev=12, n_test=12, num_labels=3
    )


@pytest.fixture(scope="session")
def task_labels(task_dir: Path) -> list[str]:
    labels: list[str] = json.loads((task_dir / "task.json").read_text())["labels"]
    return labels


def build_lora_adapter(base_dir: Path, out_dir: Path, labels: list[str], seed: int = 0) -> Path:
    """A real PEFT LoRA adapter (SEQ_CLS, classifier head saved) with its label2id.json."""
    import peft
    import torch
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.manual_seed(seed)
    base = AutoModelForSequenceClassification.from_pretrained(base_dir, num_labels=len(labels))
    model = peft.get_peft_model(
        base, peft.LoraConfig(task_type="SEQ_CLS", r=4, target_modules=["query", "value"])
    )
    model.save_pretrained(out_dir)
    (out_dir / "label2id.json").write_text(json.dumps({label: i for i, label in enumerate(labels)}))
    return out_dir


@pytest.fixture(scope="session")
def lora_adapter_dir(artifacts_dir: Path, tiny_model_dir: Path, task_labels: list[str]) -> Path:
    return build_lora_adapter(tiny_model_dir, artifacts_dir / "lora-v1", task_labels)


@pytest.fixture(scope="session")
def wide_lora_adapter_dir(
    artifacts_dir: Path, wide_model_dir: Path, task_labels: list[str]
) -> Path:
    return build_lora_adapter(wide_model_dir, artifacts_dir / "lora-wide", task_labels)


@pytest.fixture
def registry_state(db: TestDatabase, store: ArtifactStore) -> Callable[[], tuple[dict, dict]]:  # type: ignore[type-arg]
    """Snapshot of every registry row (API keys aside) and every stored file."""
    from svc_helpers import stored_files, table_rows

    def snapshot() -> tuple[dict, dict]:  # type: ignore[type-arg]
        with db.session() as session:
            rows = table_rows(session)
        rows.pop("api_keys", None)  # last_used_at moves with every authenticated call
        return rows, stored_files(Path(store.root_path))

    return snapshot
