"""PostgreSQL stopped and started under a running API server (its own private cluster).

While the database is down every call that needs it answers 503 ``DatabaseUnavailable`` (the
readiness probe 503 ``NotReady``, the liveness probe 200); once it is back the same server
process answers again by itself. Registrations sent throughout (models, and versions with their
uploaded files) are either acknowledged and stored whole, or refused and not stored at all: no
half-written row, no row without its files, no files without a row.
"""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from live_stack import create_api_key, postgres_database, tar_gz, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(300)]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_api_answers_503_while_postgres_is_down_and_recovers(
    private_postgres, redis_url, start_server, tiny, tmp_path
):  # type: ignore[no-untyped-def]
    with postgres_database(private_postgres.admin_url) as database_url:
        server = start_server(database_url, redis_url)
        key = create_api_key(database_url)
        client = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60
        )
        assert client.post("/v1/models", json={"name": "pg"}).status_code == 201
        archive = tar_gz(tiny["v1"])

        sent: list[tuple[str, str, int, dict]] = []  # type: ignore[type-arg]
        stop = threading.Event()

        def register_forever() -> None:
            index = 0
            while not stop.is_set():
                name = f"m-{index}"
                response = client.post("/v1/models", json={"name": name})
                sent.append(("model", name, response.status_code, response.json()))
                response = client.post(
                    "/v1/models/pg/versions",
                    files={"file": ("v.tar.gz", archive, "application/gzip")},
                )
                sent.append(("version", "pg", response.status_code, response.json()))
                index += 1

        writer = threading.Thread(target=register_forever, daemon=True)
        writer.start()
        wait_until(lambda: len(sent) >= 6, 60, "registrations before the outage")

        private_postgres.stop("fast")  # terminates every session, aborts open transactions
        try:
            for method, path in (
                ("GET", "/v1/models"),
                ("GET", "/v1/models/pg/versions"),
                ("POST", "/v1/models"),
                ("GET", "/v1/jobs"),
            ):
                body = {"json": {"name": "while-down"}} if method == "POST" else {}
                response = client.request(method, path, **body)
                assert response.status_code == 503, (method, path, response.text)
                assert response.json()["error"] == "DatabaseUnavailable", response.text
                assert "retry" in response.json()["detail"]
            ready = client.get("/readyz")
            assert ready.status_code == 503 and ready.json()["error"] == "NotReady"
            assert ready.json()["checks"]["database"] != "ok"
            assert client.get("/healthz").status_code == 200
            time.sleep(2)  # the writer keeps trying while it is down
        finally:
            private_postgres.start()

        def answers() -> bool:
            return client.get("/v1/models").status_code == 200

        wait_until(answers, 60, "the API to answer again without a restart")
        assert client.get("/readyz").status_code == 200
        down_count = len(sent)
        wait_until(lambda: len(sent) >= down_count + 4, 60, "registrations after the outage")
        stop.set()
        writer.join(60)
        assert server.process is not None and server.process.poll() is None  # never restarted

        statuses = [status for _kind, _name, status, _body in sent]
        assert set(statuses) <= {201, 503}, [s for s in sent if s[2] not in (201, 503)]
        assert 503 in statuses and statuses[-1] == 201
        refused = [body for _k, _n, status, body in sent if status == 503]
        assert {body["error"] for body in refused} <= {"DatabaseUnavailable"}, refused

        # What was acknowledged is there; what was refused is not; every row has its files.
        engine = sa.create_engine(database_url)
        with engine.connect() as connection:
            models = set(connection.execute(sa.text("SELECT name FROM models")).scalars())
            versions = connection.execute(
                sa.text(
                    "SELECT v.version, v.artifact_uri, v.manifest FROM model_versions v "
                    "JOIN models m ON m.id = v.model_id WHERE m.name = 'pg' ORDER BY v.version"
                )
            ).all()
        engine.dispose()
        created = {name for kind, name, status, _ in sent if kind == "model" and status == 201}
        assert models == created | {"pg"}
        acknowledged = sorted(
            body["version"]
            for kind, _n, status, body in sent
            if kind == "version" and status == 201
        )
        assert [row.version for row in versions] == acknowledged
        artifacts = tmp_path / "data" / "artifacts" / "models" / "pg"
        on_disk = {path.name for path in artifacts.iterdir()}
        assert on_disk == {row.artifact_uri.rstrip("/").rsplit("/", 1)[-1] for row in versions}
        for row in versions:
            directory = artifacts / row.artifact_uri.rstrip("/").rsplit("/", 1)[-1]
            assert {p.name: _sha256(p) for p in directory.iterdir()} == row.manifest
        assert not list((tmp_path / "data").rglob("*.tmp-*"))
