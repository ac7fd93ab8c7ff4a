"""An artifact write that fails part-way: no corrupted file, no dangling registry entry.

The artifact store runs on a real fsspec filesystem (``diskfull://``, fsspec's in-memory
filesystem) whose "disk" holds a fixed number of bytes: a write that passes it has already put
part of the file on the disk when ENOSPC is raised, as a full volume does. Uploads get 503
``ArtifactStoreUnavailable`` with the registry and the store exactly as before; a job whose
output cannot be stored is retried and, once there is room, succeeds with a whole adapter.
"""

# ruff: noqa: F811  (the fixtures imported from engine_helpers are redefined as parameters)

from __future__ import annotations

import errno
import hashlib
import uuid
from typing import ClassVar

import fsspec
import pytest
from engine_helpers import (  # noqa: F401  (fixtures)
    ENGINE_SETTINGS,
    get_job,
    job_rows,
    recorder,
    registry,
    worker,
)
from fsspec.implementations.memory import MemoryFile, MemoryFileSystem
from svc_helpers import create_model, register_version, tar_gz_of

from app.db import JobStatus
from app.jobs import execution

UNLIMITED = 10**12


class DiskFullFileSystem(MemoryFileSystem):
    """fsspec's memory filesystem with a byte budget shared by every write (a small disk)."""

    protocol = ("diskfull",)
    store: ClassVar[dict] = {}  # type: ignore[type-arg]  (its own files, not memory://'s)
    pseudo_dirs: ClassVar[list[str]] = [""]
    free_bytes = UNLIMITED
    failed_writes = 0

    @classmethod
    def _strip_protocol(cls, path):  # type: ignore[no-untyped-def]
        if isinstance(path, str) and path.startswith("diskfull://"):
            path = "memory://" + path[len("diskfull://") :]
        return super()._strip_protocol(path)

    def _open(self, path, mode="rb", **kwargs):  # type: ignore[no-untyped-def]
        handle = super()._open(path, mode, **kwargs)
        if "w" not in mode and "a" not in mode:
            return handle
        filesystem = type(self)
        original_write = handle.write

        def write(data):  # type: ignore[no-untyped-def]
            if len(data) > filesystem.free_bytes:
                part = max(filesystem.free_bytes, 0)
                original_write(data[:part])  # what fitted stays on the disk
                filesystem.free_bytes = 0
                filesystem.failed_writes += 1
                raise OSError(errno.ENOSPC, "No space left on device", path)
            filesystem.free_bytes -= len(data)
            return original_write(data)

        handle.write = write
        return handle


fsspec.register_implementation("diskfull", DiskFullFileSystem, clobber=True)
assert MemoryFile  # the files it keeps are fsspec's own MemoryFile objects


def disk_contents() -> dict[str, str]:
    """sha256 of every file on the small disk."""
    return {
        path: hashlib.sha256(bytes(data.getbuffer())).hexdigest()
        for path, data in DiskFullFileSystem.store.items()
    }


@pytest.fixture
def settings_overrides():  # type: ignore[no-untyped-def]
    DiskFullFileSystem.store.clear()
    DiskFullFileSystem.pseudo_dirs[:] = [""]
    DiskFullFileSystem.free_bytes = UNLIMITED
    DiskFullFileSystem.failed_writes = 0
    return {**ENGINE_SETTINGS, "artifact_root": f"diskfull://disk-{uuid.uuid4().hex[:8]}/artifacts"}


def test_upload_that_fills_the_disk_is_503_and_leaves_nothing(
    client, store, db, tiny_model_dir, tiny_model_v2_dir
):  # type: ignore[no-untyped-def]
    from svc_helpers import table_rows

    create_model(client)
    register_version(client, tiny_model_dir)
    with db.session() as session:
        rows_before = table_rows(session)
    files_before = disk_contents()
    weights = (tiny_model_v2_dir / "model.safetensors").stat().st_size
    DiskFullFileSystem.free_bytes = weights // 2  # the disk fills in the middle of the weights

    response = client.post(
        "/v1/models/tiny/versions",
        data={"parent_version": "1"},
        files={"file": ("v2.tar.gz", tar_gz_of(tiny_model_v2_dir), "application/gzip")},
    )
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["error"] == "ArtifactStoreUnavailable" and "No space left" in body["detail"]
    assert DiskFullFileSystem.failed_writes == 1  # it did fail part-way through a file
    with db.session() as session:
        rows_after = table_rows(session)
    rows_after.pop("api_keys"), rows_before.pop("api_keys")
    assert rows_after == rows_before  # no version row, no half-written one
    assert disk_contents() == files_before  # the partial file and its staging dir are gone
    assert client.get("/v1/models/tiny/versions").json()["total"] == 1

    DiskFullFileSystem.free_bytes = UNLIMITED  # room again: the same upload now succeeds
    v2 = register_version(client, tiny_model_v2_dir, parent=1)
    assert v2["version"] == 2  # no number was burnt by the failed attempt
    stored = {
        path.rsplit("/", 1)[-1]: digest
        for path, digest in disk_contents().items()
        if v2["artifact_uri"].split("://", 1)[1] in path
    }
    assert stored == v2["manifest"]


def test_job_output_that_cannot_be_stored_is_retried_not_dangling(
    client, db, store, recorder, worker, registry
):  # type: ignore[no-untyped-def]
    job_id = client.post(
        "/v1/adapters/train",
        json={
            "model": "tiny",
            "version": 1,
            "task": "topics",
            "training": {"steps": 4, "batch_size": 8, "learning_rate": 0.005, "eval_every": 2},
        },
    ).json()["id"]
    files_before = disk_contents()
    real_register = execution.adapters_service.register_adapter_from_directory

    def register_on_a_full_disk(*args, **kwargs):  # type: ignore[no-untyped-def]
        DiskFullFileSystem.free_bytes = 1000  # the adapter's weights do not fit any more
        return real_register(*args, **kwargs)

    execution.adapters_service.register_adapter_from_directory = register_on_a_full_disk
    try:
        assert execution.execute_job(worker, job_id) == "retry"
    finally:
        execution.adapters_service.register_adapter_from_directory = real_register
    job = get_job(db, job_id)
    assert job.status == JobStatus.QUEUED and job.result_adapter_id is None
    assert "ArtifactStoreUnavailable" in (job.error_message or "") or "No space" in (
        job.error_message or ""
    )
    assert DiskFullFileSystem.failed_writes >= 1
    assert disk_contents() == files_before  # no adapter files, no staging leftovers
    assert client.get("/v1/adapters", params={"job": job_id}).json()["total"] == 0

    DiskFullFileSystem.free_bytes = UNLIMITED
    assert execution.execute_job(worker, job_id) == "succeeded"
    job = get_job(db, job_id)
    adapter = client.get(f"/v1/adapters/{job.result_adapter_id}").json()
    assert job.status == JobStatus.SUCCEEDED and adapter["job_id"] == job_id
    written = {
        path.rsplit("/", 1)[-1]: digest
        for path, digest in disk_contents().items()
        if f"/adapters/{adapter['id']}/" in path
    }
    assert written == adapter["manifest"]
    assert not [path for path in disk_contents() if ".tmp-" in path]
    assert len(job_rows(db)) == 1
