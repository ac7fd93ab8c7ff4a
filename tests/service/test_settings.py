"""Settings: defaults derived from data_dir, and validators that refuse nonsense."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.settings import Settings, get_settings


def test_defaults_live_under_data_dir(tmp_path):
    settings = Settings(data_dir=tmp_path / "d")
    assert settings.database_url == f"sqlite:///{tmp_path / 'd' / 'registry.sqlite'}"
    assert settings.broker_url == f"sqla+sqlite:///{tmp_path / 'd' / 'broker.sqlite'}"
    assert settings.artifact_root == str(tmp_path / "d" / "artifacts")
    assert settings.result_backend is None and settings.auth_required is True
    assert settings.max_upload_bytes == 2 * 1024**3 and settings.max_compression_ratio == 100
    assert settings.run_migrations_on_startup is True  # embedded


def test_environment_variables(monkeypatch, tmp_path):
    monkeypatch.setenv("RECYCLE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RECYCLE_ARTIFACT_ROOT", "s3://bucket/prefix")
    monkeypatch.setenv("RECYCLE_MAX_UPLOAD_BYTES", "1000")
    monkeypatch.setenv("RECYCLE_SOURCE_URI_ROOTS", '["/srv/models"]')
    settings = Settings()
    assert settings.artifact_root == "s3://bucket/prefix" and settings.max_upload_bytes == 1000
    assert settings.source_uri_roots == ["/srv/models"]
    get_settings.cache_clear()
    try:
        assert get_settings() is get_settings()
    finally:
        get_settings.cache_clear()


@pytest.mark.parametrize(
    "values",
    [
        {"max_upload_bytes": -1},
        {"max_upload_bytes": 0},
        {"max_archive_members": 0},
        {"max_compression_ratio": 0.5},
        {"progress_throttle_seconds": -1},
        {"base_model_cache_size": -2},
        {"environment": "staging"},
        {"webhook_secret": "changeme"},
        {"webhook_secret": "short"},
        {"max_upload_bytes": 10, "max_extracted_bytes": 5},
        {
            "environment": "production",
            "auth_required": False,
            "database_url": "postgresql+psycopg://x/y",
        },
        {"environment": "production"},  # SQLite registry in production
    ],
)
def test_nonsense_is_refused(values, tmp_path):
    with pytest.raises(ValidationError):
        Settings(data_dir=tmp_path, **values)


def test_production_settings(tmp_path):
    settings = Settings(
        data_dir=tmp_path,
        environment="production",
        database_url="postgresql+psycopg://app@db/registry",
        broker_url="redis://redis:6379/0",
        webhook_secret="x" * 32,
    )
    assert settings.run_migrations_on_startup is False
    assert settings.webhook_secret is not None and "x" * 32 not in repr(settings)
