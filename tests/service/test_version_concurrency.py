"""Concurrent version registrations on PostgreSQL get unique, gapless numbers (max+1 with retry)."""

from __future__ import annotations

import threading
import uuid

import pytest
import sqlalchemy as sa

from app.db import ModelVersion, RegisteredModel
from app.db.session import create_session_factory, transaction
from app.models import repository as repository_module
from app.models import service
from app.storage import ArtifactStore

pytestmark = pytest.mark.postgres

WRITERS = 4


def test_concurrent_registrations_get_unique_gapless_versions(
    postgres_engine, tiny_model_dir, tmp_path, monkeypatch
):
    factory = create_session_factory(postgres_engine)
    store = ArtifactStore(tmp_path / "artifacts")
    name = f"race-{uuid.uuid4().hex[:8]}"
    with transaction(factory) as session:
        service.create_model(session, name)

    # Every writer reads the same max before any of them inserts: the first attempts collide
    # on the unique (model_id, version) constraint and must retry.
    barrier = threading.Barrier(WRITERS, timeout=30)
    original = repository_module.ModelRepository.next_version_number
    first_call = threading.local()

    def synchronised_next(self, model_id):  # type: ignore[no-untyped-def]
        number = original(self, model_id)
        if not getattr(first_call, "done", False):
            first_call.done = True
            barrier.wait()
        return number

    monkeypatch.setattr(repository_module.ModelRepository, "next_version_number", synchronised_next)
    numbers: list[int] = []
    errors: list[BaseException] = []

    def register() -> None:
        try:
            with transaction(factory) as session:
                model = service.get_model(session, name)
                version = service.register_version_from_directory(
                    session, store, model=model, directory=tiny_model_dir
                )
                numbers.append(version.version)
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=register) for _ in range(WRITERS)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        assert sorted(numbers) == list(range(1, WRITERS + 1))
        with factory() as session:
            stored = session.scalars(
                sa.select(ModelVersion.version)
                .join(RegisteredModel)
                .where(RegisteredModel.name == name)
                .order_by(ModelVersion.version)
            ).all()
        assert stored == list(range(1, WRITERS + 1))
        assert len(list((tmp_path / "artifacts" / "models" / name).iterdir())) == WRITERS
    finally:
        with transaction(factory) as session:
            model_id = session.scalar(
                sa.select(RegisteredModel.id).where(RegisteredModel.name == name)
            )
            session.execute(sa.delete(ModelVersion).where(ModelVersion.model_id == model_id))
            session.execute(sa.delete(RegisteredModel).where(RegisteredModel.id == model_id))
