"""Access control, operation by operation from the app's own OpenAPI document.

For every operation: no key → 401, a malformed or unknown key → 401, a key whose role is too weak
→ 403 ``Forbidden``, a strong enough key → anything but 401/403 (and never a 5xx). The expected
role of each operation comes from :func:`required_role`, the written policy; an operation the
policy does not cover fails the test, so a new endpoint cannot ship without a decision.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest

from app.db import Role

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

OPEN = None
ROLES = (Role.READER, Role.PLATFORM, Role.ADMIN)
OPEN_PATHS = {"/healthz", "/readyz"}
"""Health checks answer without a key (and /metrics only with ``RECYCLE_METRICS_PUBLIC``)."""
MUTATIONS = {"post", "put", "patch", "delete"}


def required_role(method: str, path: str) -> Role | None:
    """The policy: the weakest role allowed to call ``method path`` (None: open)."""
    if path in OPEN_PATHS:
        return OPEN
    if path == "/v1/keys/me":
        return Role.READER
    if path.startswith("/v1/keys"):
        return Role.ADMIN  # creating, listing and revoking keys
    if path.startswith("/v1/webhooks"):
        return Role.PLATFORM  # callback URLs and delivery payloads are the platform's business
    if path == "/metrics" or path.startswith("/v1/"):
        return Role.PLATFORM if method in MUTATIONS else Role.READER
    raise AssertionError(f"no access policy for {method.upper()} {path}: add it to required_role")


def operations(app) -> list[tuple[str, str, dict[str, Any]]]:  # type: ignore[no-untyped-def]
    document = app.openapi()
    found = [
        (method, path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in {"get", "post", "put", "patch", "delete"}
    ]
    assert len(found) >= 40, "the OpenAPI document lost its operations"
    return found


def _url(path: str, operation: dict[str, Any]) -> str:
    """The path with every parameter filled by a well-typed value that names nothing."""
    kinds = {
        parameter["name"]: parameter.get("schema", {})
        for parameter in operation.get("parameters", [])
        if parameter["in"] == "path"
    }

    def fill(match: re.Match[str]) -> str:
        schema = kinds.get(match.group(1), {})
        return "424242" if schema.get("type") == "integer" else "nothing-here"

    return re.sub(r"\{([^}]+)\}", fill, path)


def _call(client: TestClient, method: str, path: str, operation: dict[str, Any], **kwargs: Any):  # type: ignore[no-untyped-def]
    content = operation.get("requestBody", {}).get("content", {})
    if "application/json" in content and "content" not in kwargs:
        kwargs["json"] = {}
    return client.request(method.upper(), _url(path, operation), **kwargs)


@pytest.fixture
def anonymous(app):  # type: ignore[no-untyped-def]
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def test_every_operation_has_a_policy_and_needs_a_key(app, anonymous):  # type: ignore[no-untyped-def]
    checked = 0
    for method, path, operation in operations(app):
        role = required_role(method, path)
        response = _call(anonymous, method, path, operation)
        if role is OPEN:
            assert response.status_code not in (401, 403), (method, path, response.text)
            continue
        label = f"{method.upper()} {path}"
        assert response.status_code == 401, (label, response.status_code, response.text)
        assert response.json()["error"] == "Unauthorized", label
        assert response.headers["www-authenticate"] == "Bearer", label
        for headers in (
            {"Authorization": "Bearer not-a-key"},
            {"X-API-Key": "rk_000000000000_unknown"},
        ):
            response = _call(anonymous, method, path, operation, headers=headers)
            assert response.status_code == 401, (label, headers, response.text)
            assert response.json()["error"] == "InvalidApiKey", (label, response.text)
        checked += 1
    assert checked >= 40


def test_each_role_gets_exactly_what_it_should(app, make_key):  # type: ignore[no-untyped-def]
    keys = {role: make_key(role, f"acl-{role.value}") for role in ROLES}
    clients = {
        role: TestClient(app, raise_server_exceptions=False, headers={"X-API-Key": secret})
        for role, secret in keys.items()
    }
    table: list[str] = []
    for method, path, operation in operations(app):
        required = required_role(method, path)
        for role, client in clients.items():
            response = _call(client, method, path, operation)
            label = f"{method.upper()} {path} as {role.value}"
            assert response.status_code < 500, (label, response.text)
            if required is not OPEN and not role.allows(required):
                assert response.status_code == 403, (label, response.status_code, response.text)
                body = response.json()
                assert body["error"] == "Forbidden" and required.value in body["detail"], label
            else:
                assert response.status_code not in (401, 403), (label, response.text)
        table.append(f"{method.upper():6} {path:45} {required.value if required else 'open'}")
    assert len(table) >= 40


def test_a_body_is_not_read_without_a_key(app, anonymous):  # type: ignore[no-untyped-def]
    """Malformed JSON or a whole upload from a caller without a key: 401, not 422 or 413."""
    response = anonymous.post(
        "/v1/models", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 401 and response.json()["error"] == "Unauthorized"
    response = anonymous.post(
        "/v1/models/m/versions", files={"file": ("m.tar.gz", b"\0" * 4096, "application/gzip")}
    )
    assert response.status_code == 401
    assert response.headers.get("connection") == "close"  # the unread body is not drained


def test_keys_are_created_by_the_cli_listed_and_revoked(db, app, make_key, settings):  # type: ignore[no-untyped-def]
    """``recycle keys create`` writes an admin key into the registry; it lists and revokes keys."""
    from typer.testing import CliRunner

    from app.cli import app as cli
    from app.settings import get_settings

    env = {"RECYCLE_DATABASE_URL": db.url, "RECYCLE_DATA_DIR": str(settings.data_dir)}
    if db.backend == "postgresql":
        pytest.skip("the CLI commits through its own connection; the PostgreSQL fixture rolls back")
    result = CliRunner().invoke(
        cli, ["keys", "create", "--name", "ops", "--role", "admin"], env=env
    )
    get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    secret = result.output.strip().splitlines()[-1]
    assert secret.startswith("rk_")
    with TestClient(app, headers={"Authorization": f"Bearer {secret}"}) as admin:
        me = admin.get("/v1/keys/me").json()
        assert (me["name"], me["role"]) == ("ops", "admin")
        reader = admin.post("/v1/keys", json={"name": "dash", "role": "reader"}).json()
        listed = admin.get("/v1/keys").json()["items"]
        assert {"ops", "dash"} <= {item["name"] for item in listed}
        assert all("secret" not in item for item in listed)
        assert admin.delete(f"/v1/keys/{reader['id']}").status_code == 204
        revoked = TestClient(app, headers={"X-API-Key": reader["secret"]}).get("/v1/models")
        assert revoked.status_code == 401 and revoked.json()["error"] == "InvalidApiKey"
