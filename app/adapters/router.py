"""``/v1/adapters``: register (upload or source_uri), list, read, download, alias, delete."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, Query, UploadFile, status
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from app.adapters import service
from app.adapters.schemas import AdapterOut, AdapterUpdate
from app.auth.dependencies import PlatformDep, ReaderDep
from app.db import AdapterStatus
from app.db.base import INT_MAX
from app.deps import SessionDep, SettingsDep, StoreDep
from app.forms import incoming, parse_json_field
from app.models.schemas import Alias
from app.pagination import Page, PaginationDep, page_of

router = APIRouter(prefix="/v1/adapters", tags=["adapters"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=AdapterOut)
def register_adapter(
    session: SessionDep,
    store: StoreDep,
    settings: SettingsDep,
    _: PlatformDep,
    task: Annotated[str, Form(description="task name")],
    model: Annotated[str | None, Form(description="model name (with version)")] = None,
    version: Annotated[
        int | None, Form(ge=1, le=INT_MAX, description="model version number")
    ] = None,
    version_id: Annotated[
        int | None,
        Form(ge=1, le=INT_MAX, description="model version id (instead of model+version)"),
    ] = None,
    name: Annotated[str | None, Form(max_length=128)] = None,
    aliases: Annotated[str | None, Form(description='JSON list, e.g. ["production"]')] = None,
    file: Annotated[
        UploadFile | None, File(description="PEFT directory as .tar.gz/.tgz/.tar/.zip")
    ] = None,
    source_uri: Annotated[
        str | None, Form(description="directory or archive the server can read")
    ] = None,
) -> AdapterOut:
    adapter = service.register_adapter(
        session,
        store,
        settings,
        upload=incoming(file),
        source_uri=source_uri,
        model=model,
        version=version,
        version_id=version_id,
        task=task,
        name=name,
        aliases=parse_json_field(aliases, list[Alias], "aliases") or [],
    )
    return AdapterOut.model_validate(adapter)


@router.get("", response_model=Page[AdapterOut])
def list_adapters(
    session: SessionDep,
    page: PaginationDep,
    _: ReaderDep,
    model: str | None = None,
    version: Annotated[int | None, Query(ge=1, le=INT_MAX)] = None,
    version_id: Annotated[int | None, Query(ge=1, le=INT_MAX)] = None,
    task: str | None = None,
    status_filter: Annotated[AdapterStatus | None, Query(alias="status")] = None,
    alias: str | None = None,
    recycled_from: str | None = None,
    job: str | None = None,
    method: str | None = None,
) -> Page[AdapterOut]:
    filters = service.AdapterFilters(
        model=model,
        version=version,
        version_id=version_id,
        task=task,
        status=status_filter,
        alias=alias,
        recycled_from=recycled_from,
        job=job,
        method=method,
    )
    return page_of(service.list_adapters(session, filters, page), AdapterOut)


@router.get("/{adapter_id}", response_model=AdapterOut)
def get_adapter(adapter_id: str, session: SessionDep, _: ReaderDep) -> AdapterOut:
    return AdapterOut.model_validate(service.get_adapter(session, adapter_id))


@router.get(
    "/{adapter_id}/download",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/gzip": {}}, "description": "the PEFT directory as .tar.gz"}
    },
)
def download_adapter(
    adapter_id: str, session: SessionDep, store: StoreDep, settings: SettingsDep, _: ReaderDep
) -> StreamingResponse:
    download = service.prepare_download(session, store, settings, adapter_id)
    headers = {"Content-Disposition": f'attachment; filename="{download.filename}"'}
    if download.fingerprint:
        headers["X-Artifact-Fingerprint"] = download.fingerprint
    return StreamingResponse(
        download.chunks,
        media_type="application/gzip",
        headers=headers,
        background=BackgroundTask(download.cleanup),
    )


@router.patch("/{adapter_id}", response_model=AdapterOut)
def update_adapter(
    adapter_id: str, body: AdapterUpdate, session: SessionDep, _: PlatformDep
) -> AdapterOut:
    adapter = service.update_adapter(
        session,
        adapter_id,
        name=body.name,
        add_aliases=body.aliases.add,
        remove_aliases=body.aliases.remove,
    )
    return AdapterOut.model_validate(adapter)


@router.delete("/{adapter_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_adapter(adapter_id: str, session: SessionDep, _: PlatformDep) -> None:
    service.delete_adapter(session, adapter_id)
