"""API keys: ``rk_<prefix>_<secret>``, stored as sha256, checked in constant time."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session

from app.auth.repository import ApiKeyRepository
from app.db import ApiKey, Role, utcnow
from app.db.session import call_after_commit, create_session_factory, transaction
from app.errors import BadRequest, Conflict, NotFound, Unauthorized
from app.pagination import Paged, Pagination

if TYPE_CHECKING:
    from app.auth.cache import VerifiedKeyCache

KEY_SCHEME = "rk"
_PREFIX_BYTES = 6  # 12 hex characters: the public, indexed part of the key
_SECRET_BYTES = 32
LAST_USED_RESOLUTION = dt.timedelta(minutes=1)
"""last_used_at is rewritten at most this often, so reads do not all become writes."""


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key (None when auth is off) and its role."""

    key_id: int | None
    name: str
    role: Role


ANONYMOUS_ADMIN = Principal(key_id=None, name="anonymous (auth disabled)", role=Role.ADMIN)


@dataclass(frozen=True)
class CreatedKey:
    key: ApiKey
    secret: str


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _split_key(secret: str) -> str | None:
    """The prefix of a well-formed key, else None."""
    scheme, _, rest = secret.partition("_")
    prefix, _, random_part = rest.partition("_")
    if scheme != KEY_SCHEME or not prefix or not random_part:
        return None
    return prefix


def looks_like_key(secret: str) -> bool:
    """Whether ``secret`` has the shape of a key (``rk_<prefix>_<random>``); no lookup."""
    return _split_key(secret) is not None


def create_key(session: Session, name: str, role: Role | str) -> CreatedKey:
    """Create an API key; the returned secret is never stored and cannot be shown again."""
    name = name.strip()
    if not name:
        raise BadRequest("a key needs a name")
    prefix = secrets.token_hex(_PREFIX_BYTES)
    secret = f"{KEY_SCHEME}_{prefix}_{secrets.token_urlsafe(_SECRET_BYTES)}"
    key = ApiKeyRepository(session).add(
        ApiKey(name=name, prefix=prefix, secret_hash=hash_secret(secret), role=Role(role))
    )
    return CreatedKey(key=key, secret=secret)


def authenticate(session: Session, secret: str, cache: VerifiedKeyCache | None = None) -> Principal:
    """The principal of a presented key; Unauthorized for unknown, malformed or revoked keys.

    ``last_used_at`` is written after the request's transaction, in a transaction of its own
    (``record_last_used``): a read holds no row lock on its key, so concurrent calls with one
    key never queue behind each other.
    """
    secret_hash = hash_secret(secret)
    if cache is not None and (known := cache.get(secret_hash)) is not None:
        return known
    prefix = _split_key(secret)
    key = ApiKeyRepository(session).get_by_prefix(prefix) if prefix else None
    if key is None or not hmac.compare_digest(key.secret_hash, secret_hash):
        raise Unauthorized("invalid API key", code="InvalidApiKey")
    if key.revoked_at is not None:
        raise Unauthorized("this API key was revoked", code="InvalidApiKey")
    now = utcnow()
    if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
        engine, key_id = session.get_bind(), key.id
        call_after_commit(session, lambda: record_last_used(engine, key_id, now))
    principal = Principal(key_id=key.id, name=key.name, role=key.role)
    if cache is not None:
        cache.put(secret_hash, principal)
    return principal


def record_last_used(bind: Engine | Connection, key_id: int, now: dt.datetime) -> None:
    """Set a key's ``last_used_at`` unless another call did within the resolution."""
    with transaction(create_session_factory(bind)) as session:
        ApiKeyRepository(session).touch_last_used(key_id, now, now - LAST_USED_RESOLUTION)


def list_keys(
    session: Session, page: Pagination, *, include_revoked: bool = False
) -> Paged[ApiKey]:
    """Keys, oldest first."""
    rows, total = ApiKeyRepository(session).list(page, include_revoked=include_revoked)
    return Paged(rows, total, page)


def revoke_key(session: Session, key_id: int, cache: VerifiedKeyCache | None = None) -> ApiKey:
    """Revoke a key (idempotent); the last active admin key cannot be revoked.

    This process forgets the key once the revocation commits; other server processes stop
    accepting it when their cached verification expires.
    """
    repository = ApiKeyRepository(session)
    key = repository.get(key_id)
    if key is None:
        raise NotFound(f"API key {key_id} does not exist")
    if key.revoked_at is not None:
        return key
    if key.role == Role.ADMIN and repository.count_active_admins() <= 1:
        raise Conflict("cannot revoke the last active admin key", code="LastAdminKey")
    key.revoked_at = utcnow()
    if cache is not None:
        call_after_commit(session, lambda: cache.forget_key(key_id))
    return key


def has_active_admin(session: Session) -> bool:
    """Whether any admin key is still valid (the first-start bootstrap checks this)."""
    return ApiKeyRepository(session).count_active_admins() > 0
