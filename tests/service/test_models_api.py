"""Models and versions over HTTP: names, numbering, lineage, tags, aliases, soft delete."""

from __future__ import annotations

import json
from pathlib import Path

from svc_helpers import create_model, register_version, tar_gz_of


def test_create_list_get_model(client):
    created = create_model(client, "minilm")
    assert created["name"] == "minilm" and created["latest_version"] is None
    create_model(client, "another")

    listing = client.get("/v1/models", params={"limit": 1})
    assert listing.status_code == 200
    body = listing.json()
    assert body["total"] == 2 and len(body["items"]) == 1 and body["items"][0]["name"] == "another"
    second = client.get("/v1/models", params={"limit": 1, "offset": 1}).json()
    assert [item["name"] for item in second["items"]] == ["minilm"]

    assert client.get("/v1/models/minilm").json()["name"] == "minilm"


def test_duplicate_model_is_409(client):
    create_model(client, "minilm")
    response = client.post("/v1/models", json={"name": "minilm"})
    assert response.status_code == 409
    assert response.json()["error"] == "ModelExists"
    assert "minilm" in response.json()["detail"]


def test_unknown_model_is_404(client):
    response = client.get("/v1/models/nope")
    assert response.status_code == 404
    assert response.json() == {"error": "ModelNotFound", "detail": "model 'nope' does not exist"}
    assert client.get("/v1/models/nope/versions/1").status_code == 404


def test_invalid_model_name_and_malformed_json_are_422(client):
    response = client.post("/v1/models", json={"name": "../etc"})
    assert response.status_code == 422 and response.json()["error"] == "ValidationError"
    response = client.post(
        "/v1/models", content=b'{"name": ', headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["error"] == "ValidationError"
    assert "JSON" in response.json()["detail"]
    response = client.post("/v1/models", json={"name": "ok", "unexpected": 1})
    assert response.status_code == 422


def test_versions_are_numbered_max_plus_one(client, tiny_model_dir, tiny_model_v2_dir):
    create_model(client)
    first = register_version(client, tiny_model_dir, tags={"stage": "base"})
    assert first["version"] == 1 and first["status"] == "READY"
    assert first["tags"] == {"stage": "base"}
    assert first["fingerprint"] and len(first["manifest"]) >= 3
    assert first["signature"]["hidden_size"] == 32 and first["model_class"] == "BertForMaskedLM"
    second = register_version(client, tiny_model_v2_dir, parent=1)
    assert second["version"] == 2 and second["parent_version"] == 1
    assert second["fingerprint"] != first["fingerprint"]

    # A deleted number is never reused.
    assert client.delete("/v1/models/tiny/versions/2").status_code == 204
    third = register_version(client, tiny_model_v2_dir, parent=1)
    assert third["version"] == 3

    listing = client.get("/v1/models/tiny/versions").json()
    assert [item["version"] for item in listing["items"]] == [3, 1] and listing["total"] == 2
    assert client.get("/v1/models/tiny").json()["latest_version"] == 3


def test_parent_must_exist_and_be_live(client, tiny_model_dir, registry_state):
    create_model(client)
    register_version(client, tiny_model_dir)
    before = registry_state()
    missing = register_version(client, tiny_model_dir, parent=7, expect=404)
    assert missing["error"] == "ParentVersionNotFound"
    assert registry_state() == before

    register_version(client, tiny_model_dir, parent=1)
    client.delete("/v1/models/tiny/versions/1")
    deleted = register_version(client, tiny_model_dir, parent=1, expect=400)
    assert deleted["error"] == "ParentVersionDeleted"


def test_register_from_source_uri(client, tiny_model_dir):
    create_model(client)
    response = client.post(
        "/v1/models/tiny/versions", data={"source_uri": str(tiny_model_dir), "description": "v1"}
    )
    assert response.status_code == 201, response.text
    assert response.json()["description"] == "v1"
    # Neither or both sources: 400.
    assert client.post("/v1/models/tiny/versions", data={}).json()["error"] == "InvalidSource"
    missing = client.post("/v1/models/tiny/versions", data={"source_uri": "/no/such/dir"})
    assert missing.status_code == 400 and missing.json()["error"] == "SourceNotFound"


def test_version_files_round_trip_through_the_store(client, store, tiny_model_dir, tmp_path):
    from recycling_core.files import file_manifest

    create_model(client)
    version = register_version(client, tiny_model_dir)
    fetched = store.fetch_directory(version["artifact_uri"], tmp_path / "copy", version["manifest"])
    assert file_manifest(fetched) == file_manifest(tiny_model_dir) == version["manifest"]


def test_aliases_move_and_resolve(client, tiny_model_dir):
    create_model(client)
    register_version(client, tiny_model_dir, aliases=["production"])
    register_version(client, tiny_model_dir)
    assert client.get("/v1/models/tiny/aliases/production").json()["version"] == 1

    moved = client.patch(
        "/v1/models/tiny/versions/2", json={"aliases": {"add": ["production", "latest"]}}
    )
    assert moved.status_code == 200 and moved.json()["aliases"] == ["latest", "production"]
    assert client.get("/v1/models/tiny/aliases/production").json()["version"] == 2
    assert client.get("/v1/models/tiny/versions/1").json()["aliases"] == []
    assert client.get("/v1/models/tiny").json()["aliases"] == {"latest": 2, "production": 2}

    # Removing an alias from a version it does not point at leaves it alone.
    client.patch("/v1/models/tiny/versions/1", json={"aliases": {"remove": ["production"]}})
    assert client.get("/v1/models/tiny/aliases/production").json()["version"] == 2
    client.patch("/v1/models/tiny/versions/2", json={"aliases": {"remove": ["latest"]}})
    missing = client.get("/v1/models/tiny/aliases/latest")
    assert missing.status_code == 404 and missing.json()["error"] == "AliasNotFound"

    bad = client.patch("/v1/models/tiny/versions/2", json={"aliases": {"add": ["7"]}})
    assert bad.status_code == 422


def test_tags_are_set_replaced_and_deleted(client, tiny_model_dir):
    create_model(client)
    register_version(client, tiny_model_dir, tags={"a": "1", "b": "2"})
    response = client.patch(
        "/v1/models/tiny/versions/1",
        json={"tags": {"a": "10", "b": None, "c": "3"}, "description": "d"},
    )
    assert response.status_code == 200
    assert response.json()["tags"] == {"a": "10", "c": "3"}
    assert response.json()["description"] == "d"


def test_soft_delete_hides_version_and_drops_aliases(client, tiny_model_dir):
    create_model(client)
    register_version(client, tiny_model_dir, aliases=["production"])
    assert client.delete("/v1/models/tiny/versions/1").status_code == 204
    assert client.get("/v1/models/tiny/versions/1").status_code == 404
    assert client.get("/v1/models/tiny/versions").json()["total"] == 0
    assert client.get("/v1/models/tiny/aliases/production").status_code == 404
    assert client.get("/v1/models/tiny").json()["aliases"] == {}
    assert client.delete("/v1/models/tiny/versions/1").status_code == 404


def test_soft_delete_model(client, tiny_model_dir):
    create_model(client)
    register_version(client, tiny_model_dir, aliases=["production"])
    assert client.delete("/v1/models/tiny").status_code == 204
    assert client.get("/v1/models/tiny").status_code == 404
    assert client.get("/v1/models").json()["total"] == 0
    again = client.post("/v1/models", json={"name": "tiny"})
    assert again.status_code == 409 and "deleted" in again.json()["detail"]


def test_malformed_form_json_is_422(client, tiny_model_dir, registry_state):
    create_model(client)
    before = registry_state()
    response = client.post(
        "/v1/models/tiny/versions",
        data={"tags": "{not json"},
        files={"file": ("m.tar.gz", tar_gz_of(tiny_model_dir), "application/gzip")},
    )
    assert response.status_code == 422 and response.json()["error"] == "ValidationError"
    response = client.post(
        "/v1/models/tiny/versions",
        data={"aliases": json.dumps(["ok", "9bad"])},
        files={"file": ("m.tar.gz", tar_gz_of(tiny_model_dir), "application/gzip")},
    )
    assert response.status_code == 422
    assert registry_state() == before


def test_invalid_model_directory_is_refused_and_nothing_stored(client, tmp_path, registry_state):
    create_model(client)
    bogus = tmp_path / "bogus"
    bogus.mkdir()
    (bogus / "README.md").write_text("not a model")
    before = registry_state()
    response = client.post(
        "/v1/models/tiny/versions",
        files={"file": ("m.tar.gz", tar_gz_of(bogus), "application/gzip")},
    )
    assert response.status_code == 400 and response.json()["error"] == "InvalidModel"
    assert registry_state() == before


def test_pickle_weights_are_refused(client, tiny_model_dir, tmp_path, registry_state):
    import shutil

    create_model(client)
    register_version(client, tiny_model_dir)
    poisoned = tmp_path / "poisoned"
    shutil.copytree(tiny_model_dir, poisoned)
    (poisoned / "pytorch_model.bin").write_bytes(b"\x80\x04\x95" + b"\x00" * 32)
    before = registry_state()
    response = client.post(
        "/v1/models/tiny/versions",
        files={"file": ("m.tar.gz", tar_gz_of(poisoned), "application/gzip")},
    )
    assert response.status_code == 400
    assert (
        response.json()["error"] == "UnsafeFile"
        and "pytorch_model.bin" in response.json()["detail"]
    )
    assert registry_state() == before


def test_version_registered_event_is_recorded(db, store, settings, tiny_model_dir):
    from app.db.session import transaction
    from app.events import ModelVersionRegistered, recorded_events, subscribe, unsubscribe
    from app.models import service

    seen: list[ModelVersionRegistered] = []

    def handler(_session, event: ModelVersionRegistered) -> None:
        seen.append(event)

    subscribe(ModelVersionRegistered, handler)
    try:
        with transaction(db.session_factory) as session:
            model = service.create_model(session, "tiny")
            v1 = service.register_version_from_directory(
                session, store, model=model, directory=tiny_model_dir
            )
            v2 = service.register_version_from_directory(
                session, store, model=model, directory=tiny_model_dir, parent=v1
            )
            events = recorded_events(session)
    finally:
        unsubscribe(ModelVersionRegistered, handler)
    assert [e.version for e in seen] == [1, 2]
    assert seen[1].parent_version_id == v1.id and seen[1].model_version_id == v2.id
    assert events == seen
    assert Path(tiny_model_dir).is_dir()  # move=False leaves the source alone
