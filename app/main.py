"""The FastAPI application: ``create_app(settings)`` wires routers, handlers and state."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.adapters.router import router as adapters_router
from app.admin.broker import BrokerStats
from app.admin.router import router as admin_router
from app.auth.cache import VerifiedKeyCache
from app.auth.middleware import CredentialsRequiredMiddleware
from app.auth.router import router as auth_router
from app.campaigns import service as campaigns_service
from app.campaigns.router import policy_router as campaign_policy_router
from app.campaigns.router import router as campaigns_router
from app.context import install_context
from app.dashboard.router import STATIC_PATH as DASHBOARD_STATIC_PATH
from app.dashboard.router import router as dashboard_router
from app.dashboard.router import static_files as dashboard_static_files
from app.db.migrate import upgrade_to_head
from app.db.session import create_db_engine, create_session_factory
from app.errors import install_error_handlers
from app.health.router import router as health_router
from app.health.service import DEFAULT_CHECKS, add_readiness_check
from app.jobs.reaper import Reaper
from app.jobs.router import router as jobs_router
from app.jobs.router import train_router as adapter_training_router
from app.middleware import BodySizeLimitMiddleware
from app.models.router import router as models_router
from app.openapi import install_error_documentation
from app.observability.metrics import ServiceMetrics
from app.observability.requests import ObservabilityMiddleware
from app.observability.router import router as metrics_router
from app.queue import CeleryDispatcher, broker_probe, create_celery_app
from app.reports.router import router as reports_router
from app.settings import Settings, get_settings
from app.storage import ArtifactStore
from app.tasks.router import router as tasks_router
from app.webhooks import service as webhooks_service
from app.webhooks.router import router as webhooks_router

logger = logging.getLogger(__name__)

MULTIPART_OVERHEAD_BYTES = 1024 * 1024
"""Room for form fields and multipart boundaries on top of the largest accepted file."""

ROUTERS = (
    health_router,
    auth_router,
    models_router,
    tasks_router,
    adapter_training_router,
    adapters_router,
    reports_router,
    jobs_router,
    campaign_policy_router,
    campaigns_router,
    webhooks_router,
    admin_router,
    metrics_router,
    dashboard_router,
)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service app; in embedded mode the schema is migrated to head at start-up."""
    settings = settings or get_settings()
    engine = create_db_engine(
        settings.database_url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.run_migrations_on_startup:
            logger.info("migrating %s to head", engine.url.render_as_string(hide_password=True))
            upgrade_to_head(settings.database_url)
        # What start-up loaded (torch, transformers, the app: ~500k objects) lives as long as
        # the process; frozen, a full garbage collection no longer walks it (~250 ms during
        # which no request is served).
        gc.collect()
        gc.freeze()
        reaper = Reaper(app.state.session_factory, settings)
        reaper.start()  # lost workers, unsent messages, stalled campaigns (app.jobs.reaper)
        try:
            yield
        finally:
            await reaper.stop()
            engine.dispose()

    app = FastAPI(
        title="Adapter recycling service",
        version="0.1.0",
        summary="Registry and scheduler for recycling PEFT adapters across base-model upgrades",
        lifespan=lifespan,
    )
    # Requests larger than this are refused with 413 before their body is read (from
    # Content-Length) or as soon as the streamed body passes it.
    app.add_middleware(
        BodySizeLimitMiddleware, max_body_size=settings.max_upload_bytes + MULTIPART_OVERHEAD_BYTES
    )
    # Outside the size limit: a call without a key is refused before a byte of its body is read.
    app.add_middleware(CredentialsRequiredMiddleware, settings=settings)
    app.state.settings = settings
    app.state.engine = engine
    app.state.session_factory = create_session_factory(engine)
    app.state.read_session_factory = create_session_factory(
        engine.execution_options(isolation_level="AUTOCOMMIT")
    )
    app.state.key_cache = VerifiedKeyCache(settings.api_key_cache_seconds)
    app.state.artifact_store = ArtifactStore(settings.artifact_root)
    app.state.readiness_checks = list(DEFAULT_CHECKS)
    # Jobs: sent by name to the broker after their transaction commits (app.queue).
    app.state.celery = create_celery_app(settings)
    app.state.job_dispatcher = CeleryDispatcher(app.state.celery)
    install_context(
        app.state.session_factory, settings, app.state.artifact_store, app.state.job_dispatcher
    )
    add_readiness_check(app, "broker", broker_probe(app.state.celery))
    campaigns_service.install()
    webhooks_service.install()
    # Operators: queue depth and workers from the broker (cached), Prometheus metrics, request
    # ids and an access log line per request (outermost middleware: it sees every answer).
    app.state.broker_stats = BrokerStats(app.state.celery)
    app.state.metrics = ServiceMetrics(app.state.session_factory, app.state.broker_stats)
    app.add_middleware(ObservabilityMiddleware, metrics=app.state.metrics.http)
    install_error_handlers(app)
    install_error_documentation(app)  # the document shows the real error bodies
    for router in ROUTERS:
        app.include_router(router)
    app.mount(DASHBOARD_STATIC_PATH, dashboard_static_files(), name="dashboard-static")
    return app
