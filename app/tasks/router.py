"""``/v1/tasks``: upload train/dev/test splits, list, read, delete."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, UploadFile, status

from app.auth.dependencies import PlatformDep, ReaderDep
from app.db import TaskKind
from app.deps import SessionDep, SettingsDep, StoreDep
from app.forms import incoming, parse_json_field
from app.pagination import Page, PaginationDep, page_of
from app.tasks import service
from app.tasks.schemas import TASK_NAME_PATTERN, Labels, TaskOut

router = APIRouter(prefix="/v1/tasks", tags=["tasks"])

SplitFile = Annotated[UploadFile | None, File(description=".jsonl or .csv")]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=TaskOut)
def create_task(
    session: SessionDep,
    store: StoreDep,
    settings: SettingsDep,
    _: PlatformDep,
    name: Annotated[str, Form(pattern=TASK_NAME_PATTERN)],
    kind: Annotated[TaskKind | None, Form(description="default: inferred from the columns")] = None,
    labels: Annotated[
        str | None, Form(description='JSON list of labels in id order, e.g. ["neg", "pos"]')
    ] = None,
    metric: Annotated[
        str | None, Form(description="accuracy, macro_f1, exact_match or loss")
    ] = None,
    description: Annotated[str | None, Form(max_length=10_000)] = None,
    train: SplitFile = None,
    dev: SplitFile = None,
    test: SplitFile = None,
) -> TaskOut:
    task = service.create_task(
        session,
        store,
        settings,
        name=name,
        kind=kind,
        labels=parse_json_field(labels, Labels, "labels"),
        metric=metric,
        description=description,
        splits={"train": incoming(train), "dev": incoming(dev), "test": incoming(test)},
    )
    return TaskOut.model_validate(task)


@router.get("", response_model=Page[TaskOut])
def list_tasks(session: SessionDep, page: PaginationDep, _: ReaderDep) -> Page[TaskOut]:
    return page_of(service.list_tasks(session, page), TaskOut)


@router.get("/{task}", response_model=TaskOut)
def get_task(task: str, session: SessionDep, _: ReaderDep) -> TaskOut:
    return TaskOut.model_validate(service.get_task(session, task))


@router.delete("/{task}", status_code=status.HTTP_204_NO_CONTENT)
def delete_task(task: str, session: SessionDep, _: PlatformDep) -> None:
    service.delete_task(session, task)
