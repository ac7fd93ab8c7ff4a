"""The artifact store: atomic put, verified fetch, refusal of foreign URIs, remote filesystems."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from app.errors import ArtifactCorrupted
from app.storage import ArtifactStore
from recycling_core.files import file_manifest, manifest_digest


@pytest.fixture(params=["local", "memory"])
def any_store(request, tmp_path) -> ArtifactStore:  # type: ignore[no-untyped-def]
    if request.param == "local":
        return ArtifactStore(tmp_path / "store")
    return ArtifactStore(f"memory://bucket-{uuid.uuid4().hex[:8]}/artifacts")


def test_put_and_fetch_round_trip(any_store, tiny_model_dir, tmp_path):
    stored = any_store.put_directory(tiny_model_dir, "models/tiny/abc")
    assert stored.manifest == file_manifest(tiny_model_dir)
    assert stored.fingerprint == manifest_digest(stored.manifest)
    assert stored.size_bytes == sum(
        p.stat().st_size for p in tiny_model_dir.iterdir() if p.is_file()
    )
    assert any_store.exists(stored.uri)
    assert not [p for p in any_store.fs.find(any_store.root_path) if ".tmp-" in p]
    fetched = any_store.fetch_directory(stored.uri, tmp_path / "out", stored.manifest)
    assert file_manifest(fetched) == stored.manifest
    with pytest.raises(FileExistsError):
        any_store.put_directory(tiny_model_dir, "models/tiny/abc")
    any_store.delete(stored.uri)
    assert not any_store.exists(stored.uri)


def test_fetch_detects_tampering_and_leaves_no_partial_copy(tmp_path, tiny_model_dir):
    store = ArtifactStore(tmp_path / "store")
    stored = store.put_directory(tiny_model_dir, "models/x/1")
    (store.local_directory(stored.uri) / "config.json").write_text("{}")
    with pytest.raises(ArtifactCorrupted, match="config.json"):
        store.fetch_directory(stored.uri, tmp_path / "out", stored.manifest)
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob("out.tmp-*"))


def test_move_put_consumes_the_source(tmp_path, tiny_model_dir):
    import shutil

    source = tmp_path / "src"
    shutil.copytree(tiny_model_dir, source)
    store = ArtifactStore(tmp_path / "store")
    stored = store.put_directory(source, "models/x/2", move=True)
    assert not source.exists()
    assert file_manifest(store.local_directory(stored.uri)) == file_manifest(tiny_model_dir)


def test_failed_put_leaves_nothing(tmp_path, tiny_model_dir, monkeypatch):
    store = ArtifactStore(tmp_path / "store")

    def failing_put(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise OSError("disk full")

    monkeypatch.setattr(store.fs, "put_file", failing_put)
    with pytest.raises(OSError, match="disk full"):
        store.put_directory(tiny_model_dir, "models/x/3")
    assert [p for p in (tmp_path / "store").rglob("*") if p.is_file()] == []


def test_uris_outside_the_store_are_refused(tmp_path):
    store = ArtifactStore(tmp_path / "store")
    for uri in ("/etc", f"file://{tmp_path}/store/../secret", "memory://elsewhere/x"):
        with pytest.raises(ValueError):
            store.delete(uri)
    with pytest.raises(ValueError):
        store.uri_for("../escape")


def test_put_file_and_stream(any_store, tmp_path):
    path = tmp_path / "report.json"
    path.write_bytes(os.urandom(3000))
    stored = any_store.put_file(path, "reports/r1.json")
    assert stored.manifest == {"report.json": file_manifest(tmp_path)["report.json"]}
    assert b"".join(any_store.iter_bytes(stored.uri)) == path.read_bytes()
    any_store.check_writable()


def test_local_directory_is_none_for_remote(tmp_path):
    remote = ArtifactStore(f"memory://bucket-{uuid.uuid4().hex[:8]}")
    assert remote.local_directory(remote.uri_for("models/a")) is None
    local = ArtifactStore(tmp_path / "s")
    assert local.local_directory(local.uri_for("models/a")) == Path(tmp_path / "s" / "models" / "a")
