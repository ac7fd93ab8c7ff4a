"""ORM models of the registry, all on one metadata (``Base.metadata``) for Alembic."""

from app.db.adapters import Adapter, AdapterAlias
from app.db.auth import ApiKey
from app.db.base import (
    AdapterStatus,
    Base,
    CampaignStatus,
    DeliveryStatus,
    JobKind,
    JobQueue,
    JobStatus,
    Role,
    TaskKind,
    VersionStatus,
    utcnow,
)
from app.db.jobs import Campaign, Job, Policy, Report
from app.db.registry import ModelAlias, ModelVersion, ModelVersionTag, RegisteredModel
from app.db.tasks import Task
from app.db.webhooks import Webhook, WebhookDelivery

__all__ = [
    "Adapter",
    "AdapterAlias",
    "AdapterStatus",
    "ApiKey",
    "Base",
    "Campaign",
    "CampaignStatus",
    "DeliveryStatus",
    "Job",
    "JobKind",
    "JobQueue",
    "JobStatus",
    "ModelAlias",
    "ModelVersion",
    "ModelVersionTag",
    "Policy",
    "RegisteredModel",
    "Report",
    "Role",
    "Task",
    "TaskKind",
    "VersionStatus",
    "Webhook",
    "WebhookDelivery",
    "utcnow",
]
