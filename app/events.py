"""Domain events recorded on the unit of work (the session) and handed to subscribers.

Handlers run synchronously inside the transaction that recorded the event, so whatever they
write (a campaign, its jobs) commits or rolls back with it; side effects outside the database
belong in ``app.db.session.call_after_commit``. The campaigns domain subscribes to
:class:`ModelVersionRegistered` to start automatic recycling.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.orm import Session

_EVENTS_KEY = "domain_events"

E = TypeVar("E")
Handler = Callable[[Session, Any], None]
_handlers: defaultdict[type, list[Handler]] = defaultdict(list)


@dataclass(frozen=True)
class ModelVersionRegistered:
    """A model version became READY; ``parent_version_id`` set when it upgrades another one."""

    model_id: int
    model_name: str
    model_version_id: int
    version: int
    parent_version_id: int | None


@dataclass(frozen=True)
class AdapterRegistered:
    """An adapter became READY (uploaded, trained or recycled)."""

    adapter_id: str
    model_version_id: int
    task_id: int
    recycled_from_id: str | None
    job_id: str | None


def subscribe(event_type: type[E], handler: Callable[[Session, E], None]) -> None:
    """Call ``handler(session, event)`` for every recorded event of ``event_type``."""
    if handler not in _handlers[event_type]:
        _handlers[event_type].append(handler)


def unsubscribe(event_type: type[E], handler: Callable[[Session, E], None]) -> None:
    if handler in _handlers[event_type]:
        _handlers[event_type].remove(handler)


def record_event(session: Session, event: object) -> None:
    """Remember ``event`` on the session's unit of work and run its subscribers now."""
    session.info.setdefault(_EVENTS_KEY, []).append(event)
    for handler in list(_handlers[type(event)]):
        handler(session, event)


def recorded_events(session: Session) -> list[object]:
    """Events recorded on this session since it was opened (for tests and audit)."""
    return list(session.info.get(_EVENTS_KEY, []))
