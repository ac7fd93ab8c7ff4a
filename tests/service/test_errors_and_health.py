"""Error rendering (one format for every status) and the health probes."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from app.deps import get_session
from app.health.service import add_readiness_check

with __import__("warnings").catch_warnings():
    __import__("warnings").simplefilter("ignore")
    from fastapi.testclient import TestClient


def test_healthz_and_readyz(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ready",
        "checks": {"database": "ok", "artifact_store": "ok", "broker": "ok"},
    }


def test_readyz_reports_failing_checks(app, client):
    def broker_down(_app) -> None:  # type: ignore[no-untyped-def]
        raise ConnectionError("broker unreachable")

    add_readiness_check(app, "broker", broker_down)
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["error"] == "NotReady" and "broker" in body["detail"]
    assert body["checks"]["database"] == "ok" and "broker unreachable" in body["checks"]["broker"]


def test_database_down_is_503(app, client):
    def broken_session():  # type: ignore[no-untyped-def]
        raise sa.exc.OperationalError("SELECT 1", {}, Exception("connection refused"))
        yield  # pragma: no cover

    app.dependency_overrides[get_session] = broken_session
    response = client.get("/v1/models")
    assert response.status_code == 503
    assert response.json()["error"] == "DatabaseUnavailable"


@pytest.mark.parametrize(
    "settings_overrides", [{"database_url": "postgresql+psycopg://nobody@127.0.0.1:1/none"}]
)
def test_unreachable_database_readiness(settings):
    from app.main import create_app

    with TestClient(create_app(settings)) as client:
        response = client.get("/readyz")
    assert response.status_code == 503 and response.json()["checks"]["database"] != "ok"


def test_unhandled_error_is_500_internal_error(app, make_key):
    from app.models import service

    def explode(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("boom")

    original = service.list_models
    service.list_models = explode
    try:
        secret = make_key("reader")
        with TestClient(
            app, raise_server_exceptions=False, headers={"X-API-Key": secret}
        ) as client:
            response = client.get("/v1/models")
    finally:
        service.list_models = original
    assert response.status_code == 500
    assert response.json() == {"error": "InternalError", "detail": "an internal error occurred"}


def test_unknown_route_and_method_use_the_error_format(client):
    response = client.get("/v1/nothing-here")
    assert response.status_code == 404 and response.json()["error"] == "NotFound"
    response = client.put("/v1/models")
    assert response.status_code == 405 and response.json()["error"] == "MethodNotAllowed"


def test_validation_error_lists_fields(client):
    response = client.get("/v1/models", params={"limit": 0})
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "ValidationError" and body["fields"][0]["loc"] == ["query", "limit"]


def test_openapi_documents_the_api(client):
    paths = client.get("/openapi.json").json()["paths"]
    for path in (
        "/v1/models",
        "/v1/models/{model}/versions",
        "/v1/tasks",
        "/v1/adapters",
        "/v1/adapters/{adapter_id}/download",
        "/v1/keys",
        "/v1/reports/{report_id}",
        "/readyz",
    ):
        assert path in paths
    assert client.get("/docs").status_code == 200


def test_reports_api(client, db):
    from app.db.session import transaction
    from app.reports import service
    from recycling_core.reports import Report

    with transaction(db.session_factory) as session:
        stored = service.store_report(session, Report(kind="compatibility", seed=3))
        service.store_report(session, {"kind": "similarity"})
    assert client.get("/v1/reports").json()["total"] == 2
    one = client.get(f"/v1/reports/{stored.id}").json()
    assert (
        one["kind"] == "compatibility"
        and one["document"]["seed"] == 3
        and one["schema_version"] == "1.0"
    )
    assert client.get("/v1/reports", params={"kind": "similarity"}).json()["total"] == 1
    assert client.get("/v1/reports", params={"job": "none"}).json()["total"] == 0
    missing = client.get("/v1/reports/nope")
    assert missing.status_code == 404 and missing.json()["error"] == "ReportNotFound"
    with transaction(db.session_factory) as session, pytest.raises(Exception) as caught:
        service.store_report(session, {"kind": "nonsense"})
    assert getattr(caught.value, "code", None) == "InvalidReport"
