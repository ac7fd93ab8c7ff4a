"""Webhook receivers that are down: deliveries retried with backoff, then FAILED and visible.

A real API server and a real Celery worker (``cpu`` queue, where deliveries go) on PostgreSQL and
Redis. A job is cancelled, which emits ``job.completed`` to two subscribers on loopback ports:

* one where nothing ever listens: every attempt fails (connection refused), the gaps between
  attempts grow, and after ``RECYCLE_WEBHOOK_MAX_ATTEMPTS`` the delivery is FAILED with its
  last error, as ``GET /v1/webhooks/{id}/deliveries`` shows;
* one whose receiver starts only after the first failed attempt: a later retry is DELIVERED,
  exactly once, with a valid signature.
"""

from __future__ import annotations

import hashlib
import hmac
import http.server
import threading
import time

import httpx
import pytest
from live_stack import (
    create_api_key,
    free_port,
    service_env,
    split_files,
    start_worker,
    stop_process,
    tar_gz,
    task_labels,
    wait_until,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(300)]

ATTEMPTS = 4
WEBHOOK_ENV = {
    "RECYCLE_WEBHOOK_BACKOFF_SECONDS": "1",
    "RECYCLE_WEBHOOK_MAX_ATTEMPTS": str(ATTEMPTS),
    "RECYCLE_WEBHOOK_TIMEOUT_SECONDS": "2",
    "RECYCLE_REAPER_INTERVAL_SECONDS": "1",
}


class Receiver(http.server.ThreadingHTTPServer):
    def __init__(self, port: int) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        received = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((dict(self.headers), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                pass

        super().__init__(("127.0.0.1", port), Handler)


def test_deliveries_to_a_down_receiver_back_off_then_fail_and_a_late_one_is_delivered(
    pg_url, redis_url, start_server, tiny, tmp_path
):  # type: ignore[no-untyped-def]
    server = start_server(pg_url, redis_url, **WEBHOOK_ENV)
    key = create_api_key(pg_url)
    api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    dead_port, late_port = free_port(), free_port()
    dead = api.post(
        "/v1/webhooks",
        json={"url": f"http://127.0.0.1:{dead_port}/hook", "events": ["job.completed"]},
    ).json()
    late = api.post(
        "/v1/webhooks",
        json={"url": f"http://127.0.0.1:{late_port}/hook", "events": ["job.cancelled"]},
    ).json()

    assert api.post("/v1/models", json={"name": "tiny"}).status_code == 201
    files = {"file": ("v1.tar.gz", tar_gz(tiny["v1"]), "application/gzip")}
    assert api.post("/v1/models/tiny/versions", files=files).status_code == 201
    task = api.post(
        "/v1/tasks",
        data={"name": "topics", "labels": task_labels(tiny["task"])},
        files=split_files(tiny["task"]),
    )
    assert task.status_code == 201, task.text
    # The worker takes only the cpu queue: the train job (gpu) waits QUEUED until cancelled.
    env = service_env(tmp_path / "data", pg_url, redis_url, **WEBHOOK_ENV)
    worker = start_worker(env, tmp_path / "worker.log", queues="cpu")
    receiver: Receiver | None = None
    try:
        job = api.post(
            "/v1/adapters/train", json={"model": "tiny", "version": 1, "task": "topics"}
        ).json()
        cancelled = api.post(f"/v1/jobs/{job['id']}/cancel").json()
        assert cancelled["status"] == "CANCELLED"
        started = time.monotonic()

        def deliveries(hook: dict) -> list[dict]:  # type: ignore[type-arg]
            return api.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["items"]

        def first_attempt_failed() -> dict | None:  # type: ignore[type-arg]
            items = deliveries(late)
            return items[0] if items and items[0]["attempts"] >= 1 else None

        failed_once = wait_until(first_attempt_failed, 60, "the first attempt at the late hook")
        assert failed_once["status"] == "PENDING" and failed_once["last_error"]
        receiver = Receiver(late_port)
        threading.Thread(target=receiver.serve_forever, daemon=True).start()

        def gave_up() -> dict | None:  # type: ignore[type-arg]
            items = deliveries(dead)
            return items[0] if items and items[0]["status"] == "FAILED" else None

        try:
            failed = wait_until(gave_up, 120, "the dead hook's delivery to be marked FAILED", 0.5)
        except TimeoutError:
            pytest.fail(f"{deliveries(dead)}\n" + (tmp_path / "worker.log").read_text()[-5000:])
        elapsed = time.monotonic() - started
        assert failed["attempts"] == ATTEMPTS and failed["event"] == "job.completed"
        assert (
            failed["payload"]["job_id"] == job["id"] and failed["payload"]["status"] == "CANCELLED"
        )
        assert (
            "refused" in failed["last_error"].lower() or "connect" in failed["last_error"].lower()
        )
        assert failed["response_status"] is None and failed["delivered_at"] is None
        # Backoff 1 s doubling (±20 %): 1 + 2 + 4 s at least 5.6 s between first and last try.
        assert elapsed >= 5.6, elapsed

        def delivered() -> dict | None:  # type: ignore[type-arg]
            items = deliveries(late)
            return items[0] if items and items[0]["status"] == "DELIVERED" else None

        done = wait_until(delivered, 60, "the late hook's delivery")
        assert 2 <= done["attempts"] <= ATTEMPTS and done["response_status"] == 204
        assert len(receiver.requests) == 1
        headers, body = receiver.requests[0]
        expected = "sha256=" + hmac.new(late["secret"].encode(), body, hashlib.sha256).hexdigest()
        assert headers["X-Recycle-Signature"] == expected
        assert headers["X-Recycle-Event"] == "job.completed"
        time.sleep(2)  # no duplicate arrives later
        assert len(receiver.requests) == 1
    finally:
        stop_process(worker)
        if receiver is not None:
            receiver.shutdown()
