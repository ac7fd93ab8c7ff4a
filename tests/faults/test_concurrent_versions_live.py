"""Clients registering versions of one model at the same moment, over HTTP, on PostgreSQL.

Eight clients, released together by a barrier, upload a version of the same model to a server
with two uvicorn worker processes. Every one gets 201 and a different number; the numbers are
exactly 1..8 (unique, no gap, no duplicate), and each row has its own complete artifact
directory. (tests/service/test_version_concurrency.py forces the collision deterministically
inside the service; this is the same race through the whole HTTP stack.)
"""

from __future__ import annotations

import hashlib
import threading

import httpx
import pytest
from live_stack import create_api_key, tar_gz

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(300)]

CLIENTS = 8


def test_simultaneous_version_registrations_get_numbers_1_to_n(
    pg_url, redis_url, start_server, tiny, tmp_path
):  # type: ignore[no-untyped-def]
    server = start_server(pg_url, redis_url, workers=2)
    headers = {"Authorization": f"Bearer {create_api_key(pg_url)}"}
    assert (
        httpx.post(f"{server.url}/v1/models", json={"name": "race"}, headers=headers).status_code
        == 201
    )
    archive = tar_gz(tiny["v1"])
    barrier = threading.Barrier(CLIENTS, timeout=60)
    results: list[httpx.Response] = []

    def register() -> None:
        with httpx.Client(base_url=server.url, headers=headers, timeout=120) as client:
            barrier.wait()
            results.append(
                client.post(
                    "/v1/models/race/versions",
                    files={"file": ("v.tar.gz", archive, "application/gzip")},
                )
            )

    threads = [threading.Thread(target=register) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert [r.status_code for r in results] == [201] * CLIENTS, [r.text for r in results]
    numbers = sorted(r.json()["version"] for r in results)
    assert numbers == list(range(1, CLIENTS + 1))
    listed = httpx.get(
        f"{server.url}/v1/models/race/versions", params={"limit": 50}, headers=headers
    ).json()
    assert sorted(v["version"] for v in listed["items"]) == numbers
    root = tmp_path / "data" / "artifacts" / "models" / "race"
    assert len(list(root.iterdir())) == CLIENTS
    for body in (r.json() for r in results):
        directory = root / body["artifact_uri"].rstrip("/").rsplit("/", 1)[-1]
        files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}
        assert files == body["manifest"]
