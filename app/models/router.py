"""``/v1/models``: models, their versions, tags and aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, Path, Query, UploadFile, status

from app.auth.dependencies import PlatformDep, ReaderDep
from app.db import VersionStatus
from app.db.base import INT_MAX
from app.deps import SessionDep, SettingsDep, StoreDep
from app.forms import incoming, parse_json_field
from app.models import service
from app.models.schemas import Alias, ModelCreate, ModelOut, TagMap, VersionOut, VersionUpdate
from app.pagination import Page, PaginationDep, page_of

router = APIRouter(prefix="/v1/models", tags=["models"])

VersionNumber = Annotated[int, Path(ge=1, le=INT_MAX)]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ModelOut)
def create_model(body: ModelCreate, session: SessionDep, _: PlatformDep) -> ModelOut:
    model = service.create_model(session, body.name, body.description)
    return ModelOut.build(model, latest_version=None)


@router.get("", response_model=Page[ModelOut])
def list_models(session: SessionDep, page: PaginationDep, _: ReaderDep) -> Page[ModelOut]:
    result = service.list_models(session, page)
    return Page[ModelOut](
        items=[ModelOut.build(item.model, item.latest_version) for item in result.items],
        total=result.total,
        limit=page.limit,
        offset=page.offset,
    )


@router.get("/{model}", response_model=ModelOut)
def get_model(model: str, session: SessionDep, _: ReaderDep) -> ModelOut:
    summary = service.get_model_summary(session, model)
    return ModelOut.build(summary.model, summary.latest_version)


@router.delete("/{model}", status_code=status.HTTP_204_NO_CONTENT)
def delete_model(model: str, session: SessionDep, _: PlatformDep) -> None:
    service.delete_model(session, model)


@router.post("/{model}/versions", status_code=status.HTTP_201_CREATED, response_model=VersionOut)
def register_version(
    model: str,
    session: SessionDep,
    store: StoreDep,
    settings: SettingsDep,
    _: PlatformDep,
    file: Annotated[
        UploadFile | None, File(description="model directory as .tar.gz/.tgz/.tar/.zip")
    ] = None,
    source_uri: Annotated[
        str | None,
        Form(description="directory or archive the server can read (path or fsspec URL)"),
    ] = None,
    parent_version: Annotated[
        int | None, Form(ge=1, le=INT_MAX, description="the version this one upgrades")
    ] = None,
    tags: Annotated[str | None, Form(description='JSON object, e.g. {"stage": "cpt-1"}')] = None,
    aliases: Annotated[str | None, Form(description='JSON list, e.g. ["latest"]')] = None,
    description: Annotated[str | None, Form(max_length=10_000)] = None,
) -> VersionOut:
    parsed_tags = parse_json_field(tags, TagMap, "tags") or {}
    parsed_aliases = parse_json_field(aliases, list[Alias], "aliases") or []
    version = service.register_version(
        session,
        store,
        settings,
        model,
        upload=incoming(file),
        source_uri=source_uri,
        parent_version=parent_version,
        tags=parsed_tags,
        aliases=parsed_aliases,
        description=description,
    )
    return VersionOut.model_validate(version)


@router.get("/{model}/versions", response_model=Page[VersionOut])
def list_versions(
    model: str,
    session: SessionDep,
    page: PaginationDep,
    _: ReaderDep,
    status_filter: Annotated[VersionStatus | None, Query(alias="status")] = None,
) -> Page[VersionOut]:
    return page_of(service.list_versions(session, model, page, status=status_filter), VersionOut)


@router.get("/{model}/versions/{version}", response_model=VersionOut)
def get_version(
    model: str, version: VersionNumber, session: SessionDep, _: ReaderDep
) -> VersionOut:
    return VersionOut.model_validate(service.get_version(session, model, version))


@router.patch("/{model}/versions/{version}", response_model=VersionOut)
def update_version(
    model: str, version: VersionNumber, body: VersionUpdate, session: SessionDep, _: PlatformDep
) -> VersionOut:
    row = service.update_version(
        session,
        model,
        version,
        description=body.description,
        tags=body.tags,
        add_aliases=body.aliases.add,
        remove_aliases=body.aliases.remove,
    )
    return VersionOut.model_validate(row)


@router.delete("/{model}/versions/{version}", status_code=status.HTTP_204_NO_CONTENT)
def delete_version(model: str, version: VersionNumber, session: SessionDep, _: PlatformDep) -> None:
    service.delete_version(session, model, version)


@router.get("/{model}/aliases/{alias}", response_model=VersionOut)
def get_version_by_alias(model: str, alias: str, session: SessionDep, _: ReaderDep) -> VersionOut:
    return VersionOut.model_validate(service.get_version_by_alias(session, model, alias))
