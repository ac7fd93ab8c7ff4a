"""Rules of tasks: splits are validated by ``recycling_core.data.load_task`` before storage."""

from __future__ import annotations

import functools
import json
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePath

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.archives import IncomingFile, save_stream
from app.db import Task, TaskKind, utcnow
from app.db.session import call_after_rollback
from app.errors import BadRequest, Conflict, NotFound
from app.pagination import Paged, Pagination
from app.settings import Settings
from app.storage import ArtifactStore
from app.tasks.repository import TaskRepository
from recycling_core.data import SPLITS, TASK_FILE, load_task

SPLIT_SUFFIXES = {".jsonl": "jsonl", ".csv": "csv"}


def _split_format(split: str, upload: IncomingFile) -> str:
    suffix = PurePath(upload.filename or "").suffix.lower()
    if suffix not in SPLIT_SUFFIXES:
        raise BadRequest(
            f"split {split!r} must be a .jsonl or .csv file, got {upload.filename!r}",
            code="InvalidDataset",
        )
    return SPLIT_SUFFIXES[suffix]


def create_task(
    session: Session,
    store: ArtifactStore,
    settings: Settings,
    *,
    name: str,
    splits: Mapping[str, IncomingFile | None],
    kind: TaskKind | None = None,
    labels: Sequence[str] | None = None,
    metric: str | None = None,
    description: str | None = None,
) -> Task:
    """Validate the uploaded train/dev/test files, store them, and register the task."""
    if TaskRepository(session).get(name, include_deleted=True) is not None:
        raise Conflict(f"task {name!r} already exists", code="TaskExists")
    missing = [split for split in SPLITS if splits.get(split) is None]
    if missing:
        raise BadRequest(f"missing split files: {', '.join(missing)}", code="InvalidDataset")
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=settings.work_dir, prefix="task-") as workdir:
        directory = Path(workdir) / "task"
        directory.mkdir()
        for split in SPLITS:
            upload = splits[split]
            assert upload is not None
            fmt = _split_format(split, upload)
            save_stream(
                upload.stream,
                directory / f"{split}.{fmt}",
                settings.max_upload_bytes,
                what=f"split {split!r}",
            )
        document: dict[str, object] = {"name": name}
        for key, value in (
            ("kind", kind),
            ("labels", labels),
            ("metric", metric),
            ("description", description),
        ):
            if value is not None:
                document[key] = list(value) if key == "labels" else str(value)
        (directory / TASK_FILE).write_text(json.dumps(document, indent=2))
        return register_task_from_directory(
            session, store, name=name, directory=directory, description=description, move=True
        )


def register_task_from_directory(
    session: Session,
    store: ArtifactStore,
    *,
    name: str,
    directory: Path,
    description: str | None = None,
    move: bool = False,
) -> Task:
    """Validate a task directory (splits + optional ``task.json``), store it, add the row."""
    data = load_task(directory)
    files = {split: data.split_files[split].name for split in SPLITS}
    stored = store.put_directory(directory, f"tasks/{name}/{uuid.uuid4().hex}", move=move)
    call_after_rollback(session, functools.partial(store.delete, stored.uri))
    task = Task(
        name=name,
        kind=TaskKind(data.kind),
        labels=list(data.labels) if data.kind == "classification" else None,
        metric=data.metric,
        description=description,
        artifact_uri=stored.uri,
        manifest=stored.manifest,
        fingerprint=stored.fingerprint,
        splits={
            split: {
                "file": files[split],
                "uri": f"{stored.uri}/{files[split]}",
                "sha256": data.fingerprints()[split],
                "examples": len(data.split(split)),
            }
            for split in SPLITS
        },
    )
    try:
        return TaskRepository(session).add(task)
    except IntegrityError:
        raise Conflict(f"task {name!r} already exists", code="TaskExists") from None


def get_task(session: Session, name: str) -> Task:
    """A live task by name, else NotFound."""
    task = TaskRepository(session).get(name)
    if task is None:
        raise NotFound(f"task {name!r} does not exist", code="TaskNotFound")
    return task


def get_task_by_id(session: Session, task_id: int) -> Task:
    task = TaskRepository(session).get_by_id(task_id)
    if task is None or task.deleted_at is not None:
        raise NotFound(f"task id {task_id} does not exist", code="TaskNotFound")
    return task


def list_tasks(session: Session, page: Pagination) -> Paged[Task]:
    rows, total = TaskRepository(session).list(page)
    return Paged(rows, total, page)


def delete_task(session: Session, name: str) -> None:
    """Soft-delete a task; its files and the adapters trained on it stay for lineage."""
    task = get_task(session, name)
    task.deleted_at = utcnow()


def fetch_task_directory(store: ArtifactStore, task: Task, dest: Path) -> Path:
    """Copy a task's split files (and task.json) to ``dest``, verifying every sha256."""
    return store.fetch_directory(task.artifact_uri, dest, task.manifest)
