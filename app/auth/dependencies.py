"""``require_reader`` / ``require_platform`` / ``require_admin``: who may call what.

Credentials come from ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``. A missing,
unknown or revoked key is 401; a key whose role is too weak is 403. With
``settings.auth_required`` off every call is allowed (embedded development only).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from sqlalchemy.orm import Session

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from app.auth.cache import VerifiedKeyCache
from app.auth.service import ANONYMOUS_ADMIN, Principal, authenticate, hash_secret
from app.db import Role
from app.deps import SessionDep, SettingsDep
from app.settings import Settings
from app.errors import Forbidden, Unauthorized

_bearer = HTTPBearer(auto_error=False, description="API key as a bearer token")
_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="API key")


async def get_key_cache(request: Request) -> VerifiedKeyCache:
    cache: VerifiedKeyCache = request.app.state.key_cache
    return cache


KeyCacheDep = Annotated[VerifiedKeyCache, Depends(get_key_cache)]


def principal_from_credentials(
    session: Session,
    settings: Settings,
    cache: VerifiedKeyCache,
    bearer: HTTPAuthorizationCredentials | None,
    api_key: str | None,
) -> Principal:
    """The caller, authenticated from its API key (may query the registry)."""
    if not settings.auth_required:
        return ANONYMOUS_ADMIN
    secret = bearer.credentials if bearer is not None else api_key
    if not secret:
        raise Unauthorized("an API key is required (Authorization: Bearer or X-API-Key)")
    return authenticate(session, secret, cache)


async def current_principal(
    session: SessionDep,
    settings: SettingsDep,
    cache: KeyCacheDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    api_key: Annotated[str | None, Depends(_api_key_header)],
) -> Principal:
    """The caller: a key verified in the last few seconds is answered on the event loop; anything
    else is looked up on a worker thread."""
    secret = bearer.credentials if bearer is not None else api_key
    if settings.auth_required and secret:
        known = cache.get(hash_secret(secret))
        if known is not None:
            return known
    return await run_in_threadpool(principal_from_credentials, session, settings, cache, bearer, api_key)


def _require(role: Role) -> Callable[[Principal], Awaitable[Principal]]:
    # async: a role comparison needs no worker thread (sync dependencies each take one)
    async def dependency(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
        if not principal.role.allows(role):
            raise Forbidden(
                f"this call needs the {role.value} role; the key has {principal.role.value}"
            )
        return principal

    dependency.__name__ = f"require_{role.value}"
    return dependency


require_reader = _require(Role.READER)
require_platform = _require(Role.PLATFORM)
require_admin = _require(Role.ADMIN)

ReaderDep = Annotated[Principal, Depends(require_reader)]
PlatformDep = Annotated[Principal, Depends(require_platform)]
AdminDep = Annotated[Principal, Depends(require_admin)]
