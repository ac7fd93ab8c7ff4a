"""Readable dependency aliases: ``SessionDep``, ``SettingsDep``, ``StoreDep``.

``get_session`` is the request's transaction owner: it commits when the path operation
returns and rolls back when it raises, before the response is sent (``scope="function"``), so
a failed commit is reported to the caller instead of being lost after a 2xx.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from app.db.session import transaction
from app.settings import Settings
from app.storage import ArtifactStore


# The dependencies that only read app state are async: FastAPI runs a sync dependency on a
# worker thread, a hop that costs more than the lookup.
async def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_store(request: Request) -> ArtifactStore:
    store: ArtifactStore = request.app.state.artifact_store
    return store


def get_session(request: Request) -> Iterator[Session]:
    with transaction(request.app.state.session_factory) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session, scope="function")]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
StoreDep = Annotated[ArtifactStore, Depends(get_store)]
