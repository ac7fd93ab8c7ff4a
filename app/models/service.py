"""Rules of the model registry: names, version numbering, lineage, tags, aliases, soft delete.

Services never commit: the caller's unit of work (request dependency or ``session_scope``)
does. Artifacts are written before their row; if the transaction then rolls back, the
after-rollback hook deletes the artifact again, so no row ever points at missing files and no
files linger without a row.
"""

from __future__ import annotations

import functools
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.archives import IncomingFile, receive_directory
from app.db import ModelVersion, RegisteredModel, VersionStatus, utcnow
from app.db.session import call_after_rollback
from app.errors import BadRequest, Conflict, NotFound
from app.events import ModelVersionRegistered, record_event
from app.models.repository import ModelRepository, VersionNumberConflict
from app.pagination import Paged, Pagination
from app.settings import Settings
from app.storage import ArtifactStore
from recycling_core.models import inspect_model_dir


@dataclass(frozen=True)
class ModelSummary:
    model: RegisteredModel
    latest_version: int | None


# --------------------------------------------------------------------------- models


def create_model(session: Session, name: str, description: str | None = None) -> RegisteredModel:
    """Register a model family; names are unique forever (a deleted name is not reused)."""
    repository = ModelRepository(session)
    existing = repository.get_model(name, include_deleted=True)
    if existing is not None:
        raise _name_taken(existing)
    try:
        return repository.add_model(RegisteredModel(name=name, description=description))
    except IntegrityError:
        raise Conflict(f"model {name!r} already exists", code="ModelExists") from None


def _name_taken(model: RegisteredModel) -> Conflict:
    if model.deleted_at is not None:
        return Conflict(
            f"model {model.name!r} was deleted; its name is kept for lineage", code="ModelExists"
        )
    return Conflict(f"model {model.name!r} already exists", code="ModelExists")


def get_model(session: Session, name: str) -> RegisteredModel:
    """A live model by name, else NotFound."""
    model = ModelRepository(session).get_model(name)
    if model is None:
        raise NotFound(f"model {name!r} does not exist", code="ModelNotFound")
    return model


def get_model_summary(session: Session, name: str) -> ModelSummary:
    model = get_model(session, name)
    latest = ModelRepository(session).latest_version_numbers([model.id]).get(model.id)
    return ModelSummary(model, latest)


def list_models(session: Session, page: Pagination) -> Paged[ModelSummary]:
    """Live models by name, each with its latest READY version."""
    repository = ModelRepository(session)
    rows, total = repository.list_models(page)
    latest = repository.latest_version_numbers(model.id for model in rows)
    return Paged([ModelSummary(model, latest.get(model.id)) for model in rows], total, page)


def delete_model(session: Session, name: str) -> None:
    """Soft-delete a model and drop its aliases; versions and adapters stay for lineage."""
    model = get_model(session, name)
    repository = ModelRepository(session)
    model.deleted_at = utcnow()
    repository.remove_model_aliases(model.id)
    repository.refresh_aliases(model)


# --------------------------------------------------------------------------- versions


def _parent(
    repository: ModelRepository, model: RegisteredModel, parent_version: int | None
) -> ModelVersion | None:
    if parent_version is None:
        return None
    parent = repository.get_version(model.id, parent_version, include_deleted=True)
    if parent is None:
        raise NotFound(
            f"parent version {parent_version} of model {model.name!r} does not exist",
            code="ParentVersionNotFound",
        )
    if parent.deleted_at is not None:
        raise BadRequest(
            f"parent version {parent_version} of model {model.name!r} was deleted",
            code="ParentVersionDeleted",
        )
    if parent.status != VersionStatus.READY:
        raise BadRequest(
            f"parent version {parent_version} of model {model.name!r} is {parent.status}",
            code="ParentVersionNotReady",
        )
    return parent


def register_version(
    session: Session,
    store: ArtifactStore,
    settings: Settings,
    model_name: str,
    *,
    upload: IncomingFile | None = None,
    source_uri: str | None = None,
    parent_version: int | None = None,
    tags: Mapping[str, str] | None = None,
    aliases: Iterable[str] = (),
    description: str | None = None,
) -> ModelVersion:
    """Register a new version from an uploaded archive or a ``source_uri`` the server reads."""
    model = get_model(session, model_name)
    parent = _parent(ModelRepository(session), model, parent_version)
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=settings.work_dir, prefix="version-") as workdir:
        content = receive_directory(
            upload=upload, source_uri=source_uri, workdir=Path(workdir), settings=settings
        )
        return register_version_from_directory(
            session,
            store,
            model=model,
            directory=content,
            parent=parent,
            tags=tags,
            aliases=aliases,
            description=description,
            move=True,
        )


def register_version_from_directory(
    session: Session,
    store: ArtifactStore,
    *,
    model: RegisteredModel,
    directory: Path,
    parent: ModelVersion | None = None,
    tags: Mapping[str, str] | None = None,
    aliases: Iterable[str] = (),
    description: str | None = None,
    move: bool = False,
) -> ModelVersion:
    """Validate a model directory with recycling_core, store it, and add a READY version.

    Used by the upload endpoint and by jobs that produce model versions (continual
    pre-training). ``move=True`` consumes ``directory`` (faster for large local models).
    """
    info = inspect_model_dir(directory)
    stored = store.put_directory(directory, f"models/{model.name}/{uuid.uuid4().hex}", move=move)
    call_after_rollback(session, functools.partial(store.delete, stored.uri))
    repository = ModelRepository(session)
    version = ModelVersion(
        model_id=model.id,
        model=model,
        parent_version_id=parent.id if parent else None,
        parent=parent,
        description=description,
        status=VersionStatus.READY,
        artifact_uri=stored.uri,
        manifest=stored.manifest,
        fingerprint=stored.fingerprint,
        signature=info.signature,
        model_class=info.model_class,
        size_bytes=stored.size_bytes,
    )
    try:
        repository.add_version_with_next_number(version)
    except VersionNumberConflict as error:
        raise Conflict(str(error), code="VersionNumberConflict") from error
    if tags:
        repository.set_tags(version, tags)
    now = utcnow()
    for alias in aliases:
        repository.set_alias(model.id, alias, version.id, now)
    model.updated_at = now
    repository.refresh_aliases(version, model)
    on_version_registered(session, version)
    return version


def on_version_registered(session: Session, version: ModelVersion) -> None:
    """Extension point run in the registering transaction once a version is READY.

    Records a :class:`app.events.ModelVersionRegistered` event; the campaigns service
    subscribes to it (``app.events.subscribe``) to start automatic recycling when the model's
    policy asks for it.
    """
    record_event(
        session,
        ModelVersionRegistered(
            model_id=version.model_id,
            model_name=version.model.name,
            model_version_id=version.id,
            version=version.version,
            parent_version_id=version.parent_version_id,
        ),
    )


def get_version(session: Session, model_name: str, version: int) -> ModelVersion:
    """A live version of a live model, else NotFound."""
    model = get_model(session, model_name)
    row = ModelRepository(session).get_version(model.id, version)
    if row is None:
        raise NotFound(
            f"version {version} of model {model_name!r} does not exist", code="VersionNotFound"
        )
    return row


def get_version_by_id(
    session: Session, version_id: int, *, require_ready: bool = False
) -> ModelVersion:
    """A live version by its row id (jobs refer to versions this way)."""
    row = ModelRepository(session).get_version_by_id(version_id)
    if row is None or row.deleted_at is not None or row.model.deleted_at is not None:
        raise NotFound(f"model version id {version_id} does not exist", code="VersionNotFound")
    if require_ready and row.status != VersionStatus.READY:
        raise BadRequest(f"model version id {version_id} is {row.status}", code="VersionNotReady")
    return row


def get_version_by_alias(session: Session, model_name: str, alias: str) -> ModelVersion:
    model = get_model(session, model_name)
    row = ModelRepository(session).get_alias_target(model.id, alias)
    if row is None:
        raise NotFound(f"model {model_name!r} has no alias {alias!r}", code="AliasNotFound")
    return row


def list_versions(
    session: Session, model_name: str, page: Pagination, *, status: VersionStatus | None = None
) -> Paged[ModelVersion]:
    """Live versions of a model, newest first."""
    model = get_model(session, model_name)
    rows, total = ModelRepository(session).list_versions(model.id, page, status=status)
    return Paged(rows, total, page)


def update_version(
    session: Session,
    model_name: str,
    version: int,
    *,
    description: str | None = None,
    tags: Mapping[str, str | None] | None = None,
    add_aliases: Iterable[str] = (),
    remove_aliases: Iterable[str] = (),
) -> ModelVersion:
    """Change a version's description and tags; point aliases at it (moving them) or drop them."""
    row = get_version(session, model_name, version)
    add, remove = set(add_aliases), set(remove_aliases)
    if add & remove:
        raise BadRequest(f"aliases {sorted(add & remove)} are both added and removed")
    if add and row.status != VersionStatus.READY:
        raise BadRequest(
            f"version {version} is {row.status}; only READY versions get aliases",
            code="VersionNotReady",
        )
    repository = ModelRepository(session)
    if description is not None:
        row.description = description
    if tags:
        repository.set_tags(row, tags)
    now = utcnow()
    for alias in sorted(add):
        repository.set_alias(row.model_id, alias, row.id, now)
    if remove:
        repository.remove_aliases(row.model_id, remove, version_id=row.id)
    row.updated_at = now
    repository.refresh_aliases(row)
    return row


def delete_version(session: Session, model_name: str, version: int) -> None:
    """Soft-delete a version: hidden from reads, its aliases dropped, its number never reused."""
    row = get_version(session, model_name, version)
    repository = ModelRepository(session)
    row.deleted_at = utcnow()
    repository.remove_version_aliases(row.id)
    repository.refresh_aliases(row)


# --------------------------------------------------------------------------- artifacts


def fetch_version_directory(store: ArtifactStore, version: ModelVersion, dest: Path) -> Path:
    """Copy a version's files to ``dest``, verifying each sha256 against its manifest."""
    if version.artifact_uri is None:
        raise BadRequest(f"version {version.version} has no stored files", code="VersionNotReady")
    return store.fetch_directory(version.artifact_uri, dest, version.manifest)


def version_directory(store: ArtifactStore, version: ModelVersion, scratch: Path) -> Path:
    """A readable directory of the version: the store's own when local, else a verified copy."""
    if version.artifact_uri is None:
        raise BadRequest(f"version {version.version} has no stored files", code="VersionNotReady")
    local = store.local_directory(version.artifact_uri)
    if local is not None:
        return local
    return fetch_version_directory(store, version, scratch / f"model-version-{version.id}")
