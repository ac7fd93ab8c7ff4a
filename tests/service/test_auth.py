"""API keys and roles: 401 without a valid key, 403 when the role is too weak."""

from __future__ import annotations

import pytest

from app.db import Role

with __import__("warnings").catch_warnings():
    __import__("warnings").simplefilter("ignore")
    from fastapi.testclient import TestClient


@pytest.fixture
def anonymous(app):  # type: ignore[no-untyped-def]
    with TestClient(app) as test_client:
        yield test_client


def _as(app, secret: str) -> TestClient:  # type: ignore[no-untyped-def]
    return TestClient(app, headers={"X-API-Key": secret})


def test_missing_malformed_unknown_key_is_401(anonymous):
    response = anonymous.get("/v1/models")
    assert response.status_code == 401 and response.json()["error"] == "Unauthorized"
    assert response.headers["www-authenticate"] == "Bearer"
    for secret in ("garbage", "rk_deadbeef_nope", "Bearer"):
        response = anonymous.get("/v1/models", headers={"Authorization": f"Bearer {secret}"})
        assert response.status_code == 401 and response.json()["error"] == "InvalidApiKey"


def test_health_needs_no_key(anonymous):
    assert anonymous.get("/healthz").status_code == 200


@pytest.mark.parametrize(
    ("role", "read", "register", "admin"),
    [
        (Role.READER, 200, 403, 403),
        (Role.PLATFORM, 200, 201, 403),
        (Role.ADMIN, 200, 201, 201),
    ],
)
def test_role_matrix(app, make_key, role, read, register, admin):
    client = _as(app, make_key(role))
    assert client.get("/v1/models").status_code == read
    assert client.get("/v1/reports").status_code == read
    response = client.post("/v1/models", json={"name": f"m-{role}"})
    assert response.status_code == register
    if register == 403:
        assert response.json()["error"] == "Forbidden" and "platform" in response.json()["detail"]
    assert client.post("/v1/keys", json={"name": "k", "role": "reader"}).status_code == admin
    assert client.get("/v1/keys/me").json()["role"] == role.value


def test_key_lifecycle_secret_shown_once_and_revocation(client, app):
    created = client.post("/v1/keys", json={"name": "ci", "role": "platform"})
    assert created.status_code == 201
    body = created.json()
    assert body["secret"].startswith(f"rk_{body['prefix']}_") and body["role"] == "platform"
    listing = client.get("/v1/keys").json()
    assert "secret" not in listing["items"][0] and "secret_hash" not in listing["items"][0]
    assert {item["name"] for item in listing["items"]} == {"test-admin", "ci"}

    platform = TestClient(app, headers={"Authorization": f"Bearer {body['secret']}"})
    assert platform.get("/v1/models").status_code == 200
    assert platform.get("/v1/keys/me").json()["name"] == "ci"
    assert client.delete(f"/v1/keys/{body['id']}").status_code == 204
    revoked = platform.get("/v1/models")
    assert revoked.status_code == 401 and "revoked" in revoked.json()["detail"]
    assert client.get("/v1/keys").json()["total"] == 1
    assert client.get("/v1/keys", params={"include_revoked": True}).json()["total"] == 2
    assert client.delete("/v1/keys/999999999").status_code == 404


def test_last_admin_key_cannot_be_revoked(client):
    me = client.get("/v1/keys/me").json()
    response = client.delete(f"/v1/keys/{me['key_id']}")
    assert response.status_code == 409 and response.json()["error"] == "LastAdminKey"


def test_secret_is_stored_hashed(client, db):
    import sqlalchemy as sa

    from app.db import ApiKey

    secret = client.post("/v1/keys", json={"name": "x", "role": "reader"}).json()["secret"]
    with db.session() as session:
        stored = session.scalars(sa.select(ApiKey.secret_hash)).all()
    assert secret not in stored and all(len(value) == 64 for value in stored)


@pytest.mark.parametrize("settings_overrides", [{"auth_required": False}])
def test_auth_disabled_allows_everything(anonymous):
    assert anonymous.post("/v1/models", json={"name": "open"}).status_code == 201
    assert anonymous.post("/v1/keys", json={"name": "k", "role": "admin"}).status_code == 201
    assert anonymous.get("/v1/keys/me").json()["role"] == "admin"


def test_create_key_service_for_the_cli(db):
    from app.auth import service
    from app.db.session import transaction

    with transaction(db.session_factory) as session:
        created = service.create_key(session, "bootstrap", "admin")
    with transaction(db.session_factory) as session:
        principal = service.authenticate(session, created.secret)
    assert principal.role is Role.ADMIN and principal.name == "bootstrap"
