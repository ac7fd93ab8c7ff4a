"""Rules of adapters: validation and compatibility via recycling_core, lineage, aliases.

``register_adapter_from_directory`` is the one way an adapter enters the registry: the upload
endpoint and the jobs that train or recycle adapters all go through it.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.adapters.repository import AdapterQuery, AdapterRepository
from app.archives import IncomingFile, iter_tar_gz, receive_directory
from app.db import Adapter, AdapterStatus, ModelVersion, Task, TaskKind, VersionStatus, utcnow
from app.db.session import call_after_rollback
from app.errors import BadRequest, NotFound
from app.events import AdapterRegistered, record_event
from app.models import service as models_service
from app.pagination import Paged, Pagination
from app.settings import Settings
from app.storage import ArtifactStore
from app.tasks import service as tasks_service
from recycling_core.adapters import inspect_adapter_dir
from recycling_core.compat import check_compatibility


@dataclass(frozen=True)
class AdapterFilters:
    """Adapter listing filters as the API takes them (names and numbers)."""

    model: str | None = None
    version: int | None = None
    version_id: int | None = None
    task: str | None = None
    status: AdapterStatus | None = None
    alias: str | None = None
    recycled_from: str | None = None
    job: str | None = None
    method: str | None = None


@dataclass(frozen=True)
class AdapterDownload:
    """A verified local copy of an adapter streamed as .tar.gz; ``cleanup`` removes the copy."""

    filename: str
    fingerprint: str | None
    chunks: Iterator[bytes]
    cleanup: Any


def resolve_model_version(
    session: Session, *, model: str | None, version: int | None, version_id: int | None
) -> ModelVersion:
    """The READY version named by (model, version) or by its id."""
    if version_id is not None:
        row = models_service.get_version_by_id(session, version_id)
    elif model is not None and version is not None:
        row = models_service.get_version(session, model, version)
    else:
        raise BadRequest("name the model version: model and version, or version_id")
    if row.status != VersionStatus.READY:
        raise BadRequest(f"model version {row.version} is {row.status}", code="VersionNotReady")
    return row


def register_adapter(
    session: Session,
    store: ArtifactStore,
    settings: Settings,
    *,
    upload: IncomingFile | None = None,
    source_uri: str | None = None,
    model: str | None = None,
    version: int | None = None,
    version_id: int | None = None,
    task: str,
    name: str | None = None,
    aliases: Iterable[str] = (),
) -> Adapter:
    """Register an uploaded (or server-readable) PEFT adapter for a task on a model version."""
    model_version = resolve_model_version(
        session, model=model, version=version, version_id=version_id
    )
    task_row = tasks_service.get_task(session, task)
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=settings.work_dir, prefix="adapter-") as workdir:
        content = receive_directory(
            upload=upload, source_uri=source_uri, workdir=Path(workdir), settings=settings
        )
        return register_adapter_from_directory(
            session,
            store,
            directory=content,
            model_version=model_version,
            task=task_row,
            name=name,
            aliases=aliases,
            move=True,
            scratch_dir=Path(workdir),
        )


def _task_labels(task: Task) -> tuple[str, ...] | None:
    if task.kind == TaskKind.CLASSIFICATION and task.labels:
        return tuple(task.labels)
    return None


def register_adapter_from_directory(
    session: Session,
    store: ArtifactStore,
    *,
    directory: Path,
    model_version: ModelVersion,
    task: Task,
    name: str | None = None,
    metrics: Mapping[str, Any] | None = None,
    recycled_from: Adapter | None = None,
    method: str | None = None,
    job_id: str | None = None,
    aliases: Iterable[str] = (),
    check_compat: bool = True,
    move: bool = False,
    scratch_dir: Path | None = None,
    adapter_id: str | None = None,
) -> Adapter:
    """Validate an adapter directory, check it fits ``model_version``, store it, add a READY row.

    Jobs call this with their output directory, the lineage (``recycled_from``, ``method``,
    ``job_id``) and the metrics they measured. Raises recycling_core errors (400 over HTTP):
    InvalidAdapter, UnsafeFile, IncompatibleAdapter (``field`` names the mismatch).
    ``adapter_id`` (default: a new uuid) lets a job give its output a stable id, so a run
    killed between storing the files and committing the row can find and replace them.
    """
    info = inspect_adapter_dir(directory)
    labels = _task_labels(task)
    if check_compat:
        with tempfile.TemporaryDirectory(dir=scratch_dir) as scratch:
            base_dir = models_service.version_directory(store, model_version, Path(scratch))
            check_compatibility(info, base_dir, labels=labels)
    adapter_id = adapter_id or str(uuid.uuid4())
    stored = store.put_directory(directory, f"adapters/{adapter_id}", move=move)
    call_after_rollback(session, functools.partial(store.delete, stored.uri))
    label2id = info.label2id
    if label2id is None and labels is not None:
        label2id = {label: index for index, label in enumerate(labels)}
    adapter = Adapter(
        id=adapter_id,
        name=name,
        task_id=task.id,
        task=task,
        model_version_id=model_version.id,
        model_version=model_version,
        peft_type=info.peft_type,
        peft_config=info.config,
        label2id=label2id,
        target_modules=info.target_modules,
        artifact_uri=stored.uri,
        manifest=stored.manifest,
        fingerprint=stored.fingerprint,
        size_bytes=stored.size_bytes,
        metrics=dict(metrics or {}),
        status=AdapterStatus.READY,
        recycled_from_id=recycled_from.id if recycled_from else None,
        method=method,
        job_id=job_id,
        lineage_version=(recycled_from.lineage_version + 1) if recycled_from else 1,
    )
    repository = AdapterRepository(session)
    repository.add(adapter)
    now = utcnow()
    for alias in aliases:
        repository.set_alias(adapter, alias, now)
    repository.refresh_aliases(adapter)
    record_event(
        session,
        AdapterRegistered(
            adapter_id=adapter.id,
            model_version_id=adapter.model_version_id,
            task_id=adapter.task_id,
            recycled_from_id=adapter.recycled_from_id,
            job_id=adapter.job_id,
        ),
    )
    return adapter


def get_adapter(session: Session, adapter_id: str) -> Adapter:
    """A live adapter by id, else NotFound."""
    adapter = AdapterRepository(session).get(adapter_id)
    if adapter is None:
        raise NotFound(f"adapter {adapter_id!r} does not exist", code="AdapterNotFound")
    return adapter


def list_adapters(session: Session, filters: AdapterFilters, page: Pagination) -> Paged[Adapter]:
    """Live adapters, newest first, filtered by model, version, task, status, alias, lineage."""
    if filters.version is not None and filters.model is None:
        raise BadRequest("filtering by version needs the model too")
    query = AdapterQuery(
        status=filters.status,
        alias=filters.alias,
        recycled_from_id=filters.recycled_from,
        job_id=filters.job,
        method=filters.method,
    )
    try:
        if filters.model is not None:
            model = models_service.get_model(session, filters.model)
            query = _replace(query, model_id=model.id)
            if filters.version is not None:
                version = models_service.get_version(session, filters.model, filters.version)
                query = _replace(query, model_version_id=version.id)
        if filters.version_id is not None:
            query = _replace(query, model_version_id=filters.version_id)
        if filters.task is not None:
            query = _replace(query, task_id=tasks_service.get_task(session, filters.task).id)
    except NotFound:
        return Paged([], 0, page)  # filtering by something unknown matches nothing
    rows, total = AdapterRepository(session).list(query, page)
    return Paged(rows, total, page)


def _replace(query: AdapterQuery, **changes: Any) -> AdapterQuery:
    return dataclasses.replace(query, **changes)


def update_adapter(
    session: Session,
    adapter_id: str,
    *,
    name: str | None = None,
    add_aliases: Iterable[str] = (),
    remove_aliases: Iterable[str] = (),
) -> Adapter:
    """Rename an adapter and point aliases at it (moving them within its version and task)."""
    adapter = get_adapter(session, adapter_id)
    add, remove = set(add_aliases), set(remove_aliases)
    if add & remove:
        raise BadRequest(f"aliases {sorted(add & remove)} are both added and removed")
    if add and adapter.status != AdapterStatus.READY:
        raise BadRequest(
            f"adapter is {adapter.status}; only READY adapters get aliases", code="AdapterNotReady"
        )
    repository = AdapterRepository(session)
    if name is not None:
        adapter.name = name
    now = utcnow()
    for alias in sorted(add):
        repository.set_alias(adapter, alias, now)
    if remove:
        repository.remove_aliases(adapter.id, remove)
    adapter.updated_at = now
    repository.refresh_aliases(adapter)
    return adapter


def delete_adapter(session: Session, adapter_id: str) -> None:
    """Soft-delete an adapter and drop its aliases; its files stay for lineage."""
    adapter = get_adapter(session, adapter_id)
    repository = AdapterRepository(session)
    adapter.deleted_at = utcnow()
    repository.remove_aliases(adapter.id)
    repository.refresh_aliases(adapter)


def fetch_adapter_directory(store: ArtifactStore, adapter: Adapter, dest: Path) -> Path:
    """Copy an adapter's PEFT directory to ``dest``, verifying every sha256."""
    if adapter.artifact_uri is None:
        raise BadRequest(f"adapter {adapter.id} has no stored files", code="AdapterNotReady")
    return store.fetch_directory(adapter.artifact_uri, dest, adapter.manifest)


def prepare_download(
    session: Session, store: ArtifactStore, settings: Settings, adapter_id: str
) -> AdapterDownload:
    """A verified copy of the adapter, ready to stream as ``adapter-<id>.tar.gz``."""
    adapter = get_adapter(session, adapter_id)
    if adapter.status != AdapterStatus.READY:
        raise BadRequest(f"adapter is {adapter.status}", code="AdapterNotReady")
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=settings.work_dir, prefix="download-"))
    cleanup = functools.partial(shutil.rmtree, scratch, ignore_errors=True)
    try:
        directory = fetch_adapter_directory(store, adapter, scratch / "adapter")
    except BaseException:
        cleanup()
        raise
    arcname = f"adapter-{adapter.id}"

    def chunks() -> Iterator[bytes]:
        try:
            yield from iter_tar_gz(directory, arcname)
        finally:
            cleanup()

    return AdapterDownload(
        filename=f"{arcname}.tar.gz",
        fingerprint=adapter.fingerprint,
        chunks=chunks(),
        cleanup=cleanup,
    )
