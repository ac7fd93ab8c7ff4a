"""What a transaction owner hands to the code running inside its sessions.

The API (``create_app``) and a worker process each install one :class:`ServiceContext` on their
session factory. Event handlers that run inside a transaction (a version registered → start a
campaign; a job finished → advance its campaign, queue webhook deliveries) find the settings,
the artifact store, the dispatcher and the session factory there, so they can schedule work in
a transaction of their own after the current one commits.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.db.session import SessionFactory
from app.queue import DISPATCHER_KEY, Dispatcher
from app.settings import Settings
from app.storage import ArtifactStore

CONTEXT_KEY = "service_context"


@dataclass(frozen=True)
class ServiceContext:
    settings: Settings
    store: ArtifactStore
    dispatcher: Dispatcher
    session_factory: SessionFactory


_current: ServiceContext | None = None


def install_context(
    session_factory: SessionFactory,
    settings: Settings,
    store: ArtifactStore,
    dispatcher: Dispatcher,
) -> ServiceContext:
    """Make every session of ``session_factory`` carry the context (``Session.info``).

    The context also becomes the process's current one: sessions made elsewhere (a test's own
    session factory, a script) fall back to it.
    """
    global _current
    context = ServiceContext(settings, store, dispatcher, session_factory)
    session_factory.configure(info={CONTEXT_KEY: context, DISPATCHER_KEY: dispatcher})
    _current = context
    return context


def context_of(session: Session) -> ServiceContext | None:
    """The context of the session's owner, else the process's current one, else None."""
    context: ServiceContext | None = session.info.get(CONTEXT_KEY)
    return context if context is not None else _current
