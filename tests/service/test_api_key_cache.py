"""Verified API keys are remembered for a few seconds; reads never write in their transaction."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from fastapi.testclient import TestClient

from app.auth.cache import VerifiedKeyCache
from app.auth.service import Principal, authenticate, create_key
from app.db import ApiKey, Role
from app.db.session import transaction


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def principal(key_id: int) -> Principal:
    return Principal(key_id=key_id, name=f"k{key_id}", role=Role.READER)


def test_cache_expires_forgets_and_can_be_off() -> None:
    clock = FakeClock()
    cache = VerifiedKeyCache(5.0, clock=clock)
    cache.put("a", principal(1))
    cache.put("b", principal(2))
    assert cache.get("a") == principal(1)
    clock.now += 5.0
    assert cache.get("a") is None
    cache.put("a", principal(1))
    cache.forget_key(1)
    assert cache.get("a") is None
    off = VerifiedKeyCache(0.0, clock=clock)
    off.put("a", principal(1))
    assert off.get("a") is None
    small = VerifiedKeyCache(5.0, max_entries=2, clock=clock)
    for name in "xyz":
        small.put(name, principal(ord(name)))
    assert small.get("z") is not None and len(small._entries) <= 2


def test_a_verified_key_is_trusted_until_its_entry_expires(app, client, db) -> None:  # type: ignore[no-untyped-def]
    clock = FakeClock()
    app.state.key_cache = VerifiedKeyCache(5.0, clock=clock)
    with transaction(db.session_factory) as session:
        created = create_key(session, "reader", Role.READER)
    reader = TestClient(app, headers={"X-API-Key": created.secret})
    assert reader.get("/v1/models").status_code == 200
    # Revoked behind the service's back (straight in the database): this process cannot know.
    with transaction(db.session_factory) as session:
        session.get(ApiKey, created.key.id).revoked_at = dt.datetime.now(dt.UTC)  # type: ignore[union-attr]
    assert reader.get("/v1/models").status_code == 200
    clock.now += 5.0
    refused = reader.get("/v1/models")
    assert refused.status_code == 401 and "revoked" in refused.json()["detail"]


def test_revocation_through_this_process_is_immediate(app, client) -> None:  # type: ignore[no-untyped-def]
    app.state.key_cache = VerifiedKeyCache(3600.0)
    body = client.post("/v1/keys", json={"name": "p", "role": "platform"}).json()
    platform = TestClient(app, headers={"Authorization": f"Bearer {body['secret']}"})
    assert platform.get("/v1/models").status_code == 200
    assert client.delete(f"/v1/keys/{body['id']}").status_code == 204
    assert platform.get("/v1/models").status_code == 401


def test_authentication_leaves_the_request_transaction_read_only(db) -> None:  # type: ignore[no-untyped-def]
    with transaction(db.session_factory) as session:
        created = create_key(session, "r", Role.READER)
    with transaction(db.session_factory) as session:
        assert authenticate(session, created.secret).key_id == created.key.id
        assert not session.dirty and not session.new  # no write waits for this commit
        stored = session.scalar(sa.select(ApiKey.last_used_at).where(ApiKey.id == created.key.id))
        assert stored is None
    with transaction(db.session_factory) as session:
        used = session.scalar(sa.select(ApiKey.last_used_at).where(ApiKey.id == created.key.id))
    assert used is not None  # recorded after the commit, in a transaction of its own
