"""Locust users of the load benchmark (driven by ``bench/load.py``; see docs/reliability.md).

Each user mixes reads with registrations and job submissions, all small payloads:

* reads (70 %): models, one model, its versions, adapters, jobs, tasks, campaigns, ``keys/me``;
* registrations: models (10 %), API keys (5 %), tasks with three tiny split files (5 %: each
  one stores an artifact directory);
* job submissions (10 %): ``compatibility`` jobs of the seeded adapter on the seeded v2.

The run stops by itself after ``LOAD_MAX_REQUESTS`` requests. What the server acknowledged
(names and ids) is written to ``LOAD_RECORD`` so the driver can check that nothing was lost.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import uuid

import gevent
from locust import FastHttpUser, between, events, task

API_KEY = os.environ["LOAD_API_KEY"]
MAX_REQUESTS = int(os.environ.get("LOAD_MAX_REQUESTS", "10000"))
RECORD = os.environ.get("LOAD_RECORD", "load-record.json")
ADAPTER_ID = os.environ["LOAD_ADAPTER_ID"]
TO_VERSION_ID = int(os.environ["LOAD_TO_VERSION_ID"])
LABELS = json.dumps(["neg", "pos"])
SPLIT = b'{"text": "good film", "label": "pos"}\n{"text": "bad film", "label": "neg"}\n'

acknowledged: dict[str, list[str]] = {"models": [], "keys": [], "tasks": [], "jobs": []}
timings: list[tuple[str, float, bool]] = []  # (request name, milliseconds, failed)
_sent = itertools.count(1)
_lock = threading.Lock()
_run = uuid.uuid4().hex[:6]


_environment = None
_stopping = False


@events.request.add_listener
def _count(name: str, response_time: float, exception: object = None, **_kwargs: object) -> None:
    global _stopping
    timings.append((name, round(response_time, 2), exception is not None))
    if next(_sent) >= MAX_REQUESTS and not _stopping and _environment is not None:
        _stopping = True
        # From another greenlet: users finish the request they are in (--stop-timeout), so
        # everything the server answered is also seen by the client.
        gevent.spawn(_environment.runner.quit)


@events.init.add_listener
def _keep(environment, **_kwargs):  # type: ignore[no-untyped-def]
    global _environment
    _environment = environment


@events.test_stop.add_listener
def _write_record(**_kwargs: object) -> None:
    with open(RECORD, "w") as handle:
        json.dump({"acknowledged": acknowledged, "timings": timings}, handle)


class PlatformClient(FastHttpUser):
    wait_time = between(0.0, 0.05)

    def on_start(self) -> None:
        self.headers = {"Authorization": f"Bearer {API_KEY}"}
        self.serial = itertools.count()

    def _name(self, kind: str) -> str:
        return f"load-{kind}-{_run}-{id(self) % 100000}-{next(self.serial)}"

    def _created(self, kind: str, response, value: str, status: int) -> None:  # type: ignore[no-untyped-def]
        if response.status_code == status:
            with _lock:
                acknowledged[kind].append(value)
            response.success()
        else:
            response.failure(f"{response.status_code}: {response.text[:200]}")

    # ------------------------------------------------------------------ reads (70 %)

    @task(14)
    def list_models(self) -> None:
        self.client.get("/v1/models?limit=20", headers=self.headers, name="GET /v1/models")

    @task(10)
    def get_model(self) -> None:
        self.client.get("/v1/models/load", headers=self.headers, name="GET /v1/models/{m}")

    @task(10)
    def list_versions(self) -> None:
        self.client.get(
            "/v1/models/load/versions", headers=self.headers, name="GET /v1/models/{m}/versions"
        )

    @task(10)
    def list_adapters(self) -> None:
        self.client.get("/v1/adapters?model=load", headers=self.headers, name="GET /v1/adapters")

    @task(10)
    def list_jobs(self) -> None:
        self.client.get("/v1/jobs?limit=20", headers=self.headers, name="GET /v1/jobs")

    @task(6)
    def list_tasks(self) -> None:
        self.client.get("/v1/tasks?limit=20", headers=self.headers, name="GET /v1/tasks")

    @task(5)
    def list_campaigns(self) -> None:
        self.client.get("/v1/campaigns", headers=self.headers, name="GET /v1/campaigns")

    @task(5)
    def who_am_i(self) -> None:
        self.client.get("/v1/keys/me", headers=self.headers, name="GET /v1/keys/me")

    # ------------------------------------------------------------------ registrations (20 %)

    @task(10)
    def register_model(self) -> None:
        name = self._name("m")
        with self.client.post(
            "/v1/models",
            json={"name": name, "description": "load test"},
            headers=self.headers,
            name="POST /v1/models",
            catch_response=True,
        ) as response:
            self._created("models", response, name, 201)

    @task(5)
    def create_key(self) -> None:
        name = self._name("k")
        with self.client.post(
            "/v1/keys",
            json={"name": name, "role": "reader"},
            headers=self.headers,
            name="POST /v1/keys",
            catch_response=True,
        ) as response:
            self._created("keys", response, name, 201)

    @task(5)
    def register_task(self) -> None:
        name = self._name("t")
        boundary = uuid.uuid4().hex
        parts = [
            f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\n{name}\r\n',
            f'--{boundary}\r\nContent-Disposition: form-data; name="labels"\r\n\r\n{LABELS}\r\n',
        ]
        body = "".join(parts).encode()
        for split in ("train", "dev", "test"):
            body += (
                (
                    f'--{boundary}\r\nContent-Disposition: form-data; name="{split}"; '
                    f'filename="{split}.jsonl"\r\nContent-Type: application/jsonl\r\n\r\n'
                ).encode()
                + SPLIT
                + b"\r\n"
            )
        body += f"--{boundary}--\r\n".encode()
        with self.client.post(
            "/v1/tasks",
            data=body,
            headers={**self.headers, "Content-Type": f"multipart/form-data; boundary={boundary}"},
            name="POST /v1/tasks",
            catch_response=True,
        ) as response:
            self._created("tasks", response, name, 201)

    # ------------------------------------------------------------------ job submissions (10 %)

    @task(10)
    def submit_job(self) -> None:
        with self.client.post(
            "/v1/jobs",
            json={
                "kind": "compatibility",
                "params": {"adapter_id": ADAPTER_ID, "to_version_id": TO_VERSION_ID},
            },
            headers=self.headers,
            name="POST /v1/jobs",
            catch_response=True,
        ) as response:
            job_id = response.json().get("id", "") if response.status_code == 202 else ""
            self._created("jobs", response, job_id, 202)
