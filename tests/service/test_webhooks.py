"""Webhooks: subscriptions, deliveries created with job/campaign events, HMAC signature, retries."""

# ruff: noqa: F811  (the fixtures imported from engine_helpers are redefined as parameters)

from __future__ import annotations

import hashlib
import hmac
import json

import httpx
from engine_helpers import (  # noqa: F401  (fixtures)
    finish_job,
    job_rows,
    recorder,
    register_v2,
    registry,
    settings_overrides,
    worker,
)

from app.db import JobStatus
from app.db.session import transaction
from app.webhooks import service as webhooks_service


def _subscribe(client, events: list[str], url: str = "https://hooks.example.com/recycle") -> dict:  # type: ignore[no-untyped-def]
    response = client.post("/v1/webhooks", json={"url": url, "events": events})
    assert response.status_code == 201, response.text
    return response.json()


def test_subscriptions(client, recorder):  # noqa: F811
    created = _subscribe(client, ["job.completed", "campaign.completed"])
    assert created["secret"].startswith("whsec_") and created["active"] is True
    listed = client.get("/v1/webhooks").json()
    assert listed["total"] == 1 and "secret" not in listed["items"][0]  # shown once only
    assert "secret" not in client.get(f"/v1/webhooks/{created['id']}").json()
    assert (
        client.post(
            "/v1/webhooks", json={"url": "ftp://x", "events": ["job.completed"]}
        ).status_code
        == 422
    )
    assert (
        client.post(
            "/v1/webhooks", json={"url": "https://x", "events": ["job.exploded"]}
        ).status_code
        == 422
    )
    assert client.post("/v1/webhooks", json={"url": "https://x", "events": []}).status_code == 422
    assert client.delete(f"/v1/webhooks/{created['id']}").status_code == 204
    assert client.get(f"/v1/webhooks/{created['id']}").status_code == 404
    assert client.get(f"/v1/webhooks/{created['id']}/deliveries").status_code == 404


def test_events_are_delivered_signed(
    client, db, store, recorder, registry, tiny_model_v2_dir, settings
):  # noqa: F811
    everything = _subscribe(client, ["*"])
    jobs_only = _subscribe(client, ["job.failed"], url="https://other.example.com/hook")
    register_v2(client, tiny_model_v2_dir)  # the auto campaign queues a compatibility job
    [compat] = job_rows(db)
    finish_job(db, store, compat.id, JobStatus.FAILED, error="label set differs")

    deliveries = client.get(f"/v1/webhooks/{everything['id']}/deliveries").json()["items"]
    assert sorted(d["event"] for d in deliveries) == ["campaign.completed", "job.completed"]
    [job_delivery] = client.get(f"/v1/webhooks/{jobs_only['id']}/deliveries").json()["items"]
    assert (
        job_delivery["event"] == "job.completed" and job_delivery["payload"]["status"] == "FAILED"
    )
    assert sorted(recorder.deliveries) == sorted(
        (d["id"], None) for d in [*deliveries, job_delivery]
    )

    campaign_delivery = next(d for d in deliveries if d["event"] == "campaign.completed")
    seen: list[httpx.Request] = []

    def receiver(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    client_stub = httpx.Client(transport=httpx.MockTransport(receiver))
    outcome = webhooks_service.deliver(
        db.session_factory, settings, campaign_delivery["id"], client=client_stub
    )
    assert outcome == "delivered"
    [request] = seen
    body = request.content
    expected = "sha256=" + hmac.new(everything["secret"].encode(), body, hashlib.sha256).hexdigest()
    assert request.headers["X-Recycle-Signature"] == expected
    assert request.headers["X-Recycle-Event"] == "campaign.completed"
    document = json.loads(body)
    assert document["timestamp"] == int(request.headers["X-Recycle-Timestamp"])
    assert document["data"]["status"] == "FAILED" and document["id"] == campaign_delivery["id"]
    delivered = client.get(f"/v1/webhooks/{everything['id']}/deliveries").json()["items"]
    assert next(d for d in delivered if d["id"] == campaign_delivery["id"])["status"] == "DELIVERED"
    # A second message for the same delivery does nothing.
    assert (
        webhooks_service.deliver(
            db.session_factory, settings, campaign_delivery["id"], client=client_stub
        )
        == "skipped"
    )
    assert len(seen) == 1


def test_failing_endpoint_is_retried_then_failed(
    client, db, store, recorder, registry, tiny_model_v2_dir, settings
):  # noqa: F811
    hook = _subscribe(client, ["job.completed"])
    register_v2(client, tiny_model_v2_dir)
    [compat] = job_rows(db)
    finish_job(db, store, compat.id, JobStatus.FAILED)
    [delivery] = client.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["items"]
    recorder.deliveries.clear()
    stub = httpx.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(500, text="boom"))
    )
    settings.webhook_backoff_seconds = 1.0

    assert (
        webhooks_service.deliver(db.session_factory, settings, delivery["id"], client=stub)
        == "retry"
    )
    state = client.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["items"][0]
    assert (
        state["status"] == "PENDING"
        and state["attempts"] == 1
        and "HTTP 500: boom" in state["last_error"]
    )
    assert recorder.deliveries[-1][0] == delivery["id"] and 0.8 <= recorder.deliveries[-1][1] <= 1.2
    assert (
        webhooks_service.deliver(db.session_factory, settings, delivery["id"], client=stub)
        == "retry"
    )
    assert 1.6 <= recorder.deliveries[-1][1] <= 2.4  # backoff doubles
    assert (
        webhooks_service.deliver(db.session_factory, settings, delivery["id"], client=stub)
        == "failed"
    )
    state = client.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["items"][0]
    assert (
        state["status"] == "FAILED" and state["attempts"] == 3 and state["response_status"] == 500
    )
    assert len(recorder.deliveries) == 2

    with transaction(db.session_factory) as session:
        [extra] = webhooks_service.emit(session, "job.completed", {"job_id": "x"})
    unreachable = httpx.Client(transport=httpx.MockTransport(_refuse))
    assert (
        webhooks_service.deliver(db.session_factory, settings, extra.id, client=unreachable)
        == "retry"
    )
    latest = client.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["items"][0]
    assert latest["id"] == extra.id and "ConnectError" in latest["last_error"]


def _refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)
