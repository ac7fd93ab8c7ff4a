"""Service configuration: one pydantic-settings ``Settings`` read from ``RECYCLE_*`` variables."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

GIB = 1024**3

# Secrets that ship in examples and tutorials; a deployment must never run with one of them.
_KNOWN_DEFAULT_SECRETS = frozenset(
    {"changeme", "change-me", "changethis", "secret", "password", "webhook-secret", "test"}
)
_MIN_SECRET_LENGTH = 16

Environment = Literal["embedded", "production"]


class Settings(BaseSettings):
    """Everything the service, the workers and the command line read from the environment."""

    model_config = SettingsConfigDict(
        env_prefix="RECYCLE_", env_file=None, extra="ignore", validate_default=True
    )

    environment: Environment = "embedded"
    data_dir: Path = Path("./.recycle")

    database_url: str = ""
    """SQLAlchemy URL; default: SQLite file ``<data_dir>/registry.sqlite``."""
    broker_url: str = ""
    """Celery broker URL; default: kombu's SQLAlchemy transport on ``<data_dir>/broker.sqlite``."""
    result_backend: str | None = None
    """Celery result backend; none: results live in the registry database."""
    artifact_root: str = ""
    """Local directory or fsspec URL (``s3://bucket/prefix``); default ``<data_dir>/artifacts``."""

    max_upload_bytes: int = Field(default=2 * GIB, gt=0)
    max_extracted_bytes: int = Field(default=10 * GIB, gt=0)
    """Largest total uncompressed size of one uploaded archive."""
    max_archive_members: int = Field(default=10_000, gt=0)
    max_compression_ratio: float = Field(default=100.0, ge=1.0)

    source_uri_roots: list[str] = Field(default_factory=list)
    """Where ``source_uri`` registrations may read from; empty: anywhere in embedded mode,
    nowhere in production."""

    auth_required: bool = True
    api_key_cache_seconds: float = Field(default=5.0, ge=0)
    """How long a server process trusts a verified API key without looking it up again; a key
    revoked through another process is refused there after at most this long (0: no cache)."""
    db_pool_size: int = Field(default=20, ge=1)
    db_max_overflow: int = Field(default=20, ge=0)
    """Connections per server process: pool plus overflow covers the 40 threads that run
    FastAPI's sync endpoints, so a request never waits for a connection another one holds."""
    webhook_secret: SecretStr | None = None
    """Signs webhook deliveries of webhooks registered without their own secret."""
    webhook_timeout_seconds: float = Field(default=10.0, gt=0)
    webhook_max_attempts: int = Field(default=8, ge=1)

    progress_throttle_seconds: float = Field(default=1.0, ge=0)
    base_model_cache_size: int = Field(default=2, ge=0)
    compile_training: bool = True
    """GPU workers train LoRA through torch.compile (docs/benchmarks/performance.md)."""
    batch_max_adapters: int = Field(default=8, ge=1, le=64)
    """A worker trains up to this many queued recycle jobs of one base in one batched pass."""

    # Job engine (app.jobs, workers): retries, heartbeats and the lost-worker reaper.
    job_max_attempts: int = Field(default=3, ge=1)
    """Runs a job may take (transient-error retries and lost-worker re-queues together)."""
    job_retry_backoff_seconds: float = Field(default=5.0, ge=0)
    """First retry delay after a transient error; doubles with each attempt."""
    job_retry_backoff_max_seconds: float = Field(default=300.0, ge=0)
    heartbeat_seconds: float = Field(default=10.0, gt=0)
    """How often a worker running a job refreshes ``jobs.heartbeat_at``."""
    worker_lost_seconds: float = Field(default=120.0, gt=0)
    """A RUNNING job whose heartbeat is older than this belongs to a lost worker."""
    reaper_interval_seconds: float = Field(default=15.0, ge=0)
    """How often the API process looks for lost jobs; 0 turns the background reaper off."""
    queued_redispatch_seconds: float = Field(default=1800.0, gt=0)
    """Re-send the message of a job QUEUED this long (a lost or never-sent message)."""
    webhook_backoff_seconds: float = Field(default=2.0, ge=0)
    webhook_backoff_max_seconds: float = Field(default=600.0, ge=0)
    run_migrations_on_startup: bool | None = None
    """Upgrade the schema to head when the app starts; default: only in embedded mode."""

    # Observability (app.observability): log lines, and who may scrape /metrics.
    log_format: Literal["json", "text"] = "json"
    """One JSON object per line (with request and job ids), or readable text."""
    log_level: str = "INFO"
    metrics_public: bool = False
    """Serve /metrics without an API key (a scraper inside the cluster); default: any key."""

    @field_validator("data_dir")
    @classmethod
    def _absolute_data_dir(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @field_validator("database_url", "broker_url", "artifact_root")
    @classmethod
    def _strip(cls, value: str) -> str:
        return value.strip()

    @field_validator("webhook_secret")
    @classmethod
    def _refuse_weak_webhook_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        secret = value.get_secret_value()
        if secret.lower() in _KNOWN_DEFAULT_SECRETS or len(secret) < _MIN_SECRET_LENGTH:
            raise ValueError(
                f"webhook_secret must be a random string of at least {_MIN_SECRET_LENGTH} "
                "characters, not a placeholder"
            )
        return value

    @model_validator(mode="after")
    def _fill_defaults_and_check(self) -> Settings:
        if not self.database_url:
            self.database_url = f"sqlite:///{self.data_dir / 'registry.sqlite'}"
        if not self.broker_url:
            self.broker_url = f"sqla+sqlite:///{self.data_dir / 'broker.sqlite'}"
        if not self.artifact_root:
            self.artifact_root = str(self.data_dir / "artifacts")
        if self.run_migrations_on_startup is None:
            self.run_migrations_on_startup = self.environment == "embedded"
        if self.worker_lost_seconds <= 2 * self.heartbeat_seconds:
            # A live worker must be able to miss a heartbeat without being declared lost.
            raise ValueError("worker_lost_seconds must be more than twice heartbeat_seconds")
        if self.max_extracted_bytes < self.max_upload_bytes:
            # An uploaded archive must at least be allowed to unpack to its own size.
            raise ValueError("max_extracted_bytes must not be smaller than max_upload_bytes")
        if self.environment == "production":
            if not self.auth_required:
                raise ValueError("auth_required cannot be turned off in production")
            if self.database_url.startswith("sqlite"):
                raise ValueError("production needs a server database (PostgreSQL), not SQLite")
        return self

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def work_dir(self) -> Path:
        """Scratch space for uploads being unpacked (on the data disk, not /tmp)."""
        return self.data_dir / "tmp"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
