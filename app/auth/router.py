"""``/v1/keys``: create (secret shown once), list, revoke."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, status

from app.auth import service
from app.auth.dependencies import AdminDep, KeyCacheDep, ReaderDep
from app.auth.schemas import KeyCreate, KeyCreated, KeyOut, PrincipalOut
from app.db.base import INT_MAX
from app.deps import SessionDep
from app.pagination import Page, PaginationDep, page_of

router = APIRouter(prefix="/v1/keys", tags=["auth"])

KeyId = Annotated[int, Path(ge=1, le=INT_MAX)]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=KeyCreated)
def create_key(body: KeyCreate, session: SessionDep, _: AdminDep) -> KeyCreated:
    created = service.create_key(session, body.name, body.role)
    return KeyCreated(**KeyOut.model_validate(created.key).model_dump(), secret=created.secret)


@router.get("", response_model=Page[KeyOut])
def list_keys(
    session: SessionDep,
    page: PaginationDep,
    _: AdminDep,
    include_revoked: bool = Query(False),
) -> Page[KeyOut]:
    return page_of(service.list_keys(session, page, include_revoked=include_revoked), KeyOut)


@router.get("/me", response_model=PrincipalOut)
def who_am_i(principal: ReaderDep) -> PrincipalOut:
    return PrincipalOut(key_id=principal.key_id, name=principal.name, role=principal.role)


@router.delete("/{key_id}", status_code=status.HTTP_204_NO_CONTENT)
def revoke_key(key_id: KeyId, session: SessionDep, cache: KeyCacheDep, _: AdminDep) -> None:
    service.revoke_key(session, key_id, cache)
