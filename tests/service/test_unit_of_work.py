"""One transaction owner: hooks after commit/rollback, artifacts removed when rows never land."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from app.db import ModelVersion
from app.db.session import call_after_commit, call_after_rollback, transaction
from app.models import service


def test_after_commit_runs_only_on_commit(db):
    calls: list[str] = []
    with transaction(db.session_factory) as session:
        call_after_commit(session, lambda: calls.append("commit"))
        call_after_rollback(session, lambda: calls.append("rollback"))
    assert calls == ["commit"]

    calls.clear()
    with pytest.raises(RuntimeError), transaction(db.session_factory) as session:
        call_after_commit(session, lambda: calls.append("commit"))
        call_after_rollback(session, lambda: calls.append("rollback"))
        raise RuntimeError("request failed")
    assert calls == ["rollback"]


def test_artifact_of_a_rolled_back_version_is_deleted(db, store, tiny_model_dir):
    with transaction(db.session_factory) as session:
        service.create_model(session, "tiny")
    uris: list[str] = []
    with pytest.raises(RuntimeError), transaction(db.session_factory) as session:
        model = service.get_model(session, "tiny")
        version = service.register_version_from_directory(
            session, store, model=model, directory=tiny_model_dir
        )
        uris.append(version.artifact_uri)
        assert store.exists(version.artifact_uri)
        raise RuntimeError("something after registration failed")
    assert not store.exists(uris[0])
    with db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(ModelVersion)) == 0


def test_failed_request_rolls_back_everything(client, app, tiny_model_dir, registry_state):
    """A request that fails after writing leaves no trace (rows or files)."""
    from svc_helpers import create_model, tar_gz_of

    from app.models import service as models_service

    create_model(client)
    before = registry_state()
    original = models_service.on_version_registered

    def fail_after_insert(session, version):  # type: ignore[no-untyped-def]
        raise models_service.Conflict("policy refused", code="Refused")

    models_service.on_version_registered = fail_after_insert
    try:
        response = client.post(
            "/v1/models/tiny/versions",
            files={"file": ("m.tgz", tar_gz_of(tiny_model_dir), "application/gzip")},
        )
    finally:
        models_service.on_version_registered = original
    assert response.status_code == 409 and response.json()["error"] == "Refused"
    assert registry_state() == before
