"""Adapters over HTTP: registration with compatibility checks, filters, aliases, download."""

from __future__ import annotations

import hashlib
import io
import shutil
import tarfile

from svc_helpers import create_model, create_task, register_adapter, register_version, tar_gz_of


def _setup(client, tiny_model_dir, task_dir) -> None:  # type: ignore[no-untyped-def]
    create_model(client)
    register_version(client, tiny_model_dir)
    create_task(client, task_dir)


def test_register_get_and_list_adapter(
    client, tiny_model_dir, tiny_model_v2_dir, task_dir, lora_adapter_dir, task_labels
):
    _setup(client, tiny_model_dir, task_dir)
    adapter = register_adapter(client, lora_adapter_dir)
    assert adapter["status"] == "READY" and adapter["peft_type"] == "LORA"
    assert (
        adapter["model"] == "tiny" and adapter["model_version"] == 1 and adapter["task"] == "topics"
    )
    assert adapter["label2id"] == {label: i for i, label in enumerate(task_labels)}
    assert any(module.endswith("attention.self.query") for module in adapter["target_modules"])
    assert adapter["lineage_version"] == 1 and adapter["recycled_from"] is None
    assert (
        client.get(f"/v1/adapters/{adapter['id']}").json()["fingerprint"] == adapter["fingerprint"]
    )

    v2 = register_version(client, tiny_model_v2_dir, parent=1)
    by_version_id = client.post(
        "/v1/adapters",
        data={"version_id": str(v2["id"]), "task": "topics", "name": "on-v2"},
        files={"file": ("a.zip", tar_gz_of(lora_adapter_dir), "application/gzip")},
    )
    assert by_version_id.status_code == 201, by_version_id.text
    assert by_version_id.json()["model_version"] == 2

    assert client.get("/v1/adapters").json()["total"] == 2
    assert client.get("/v1/adapters", params={"model": "tiny", "version": 1}).json()["total"] == 1
    assert (
        client.get("/v1/adapters", params={"task": "topics", "status": "READY"}).json()["total"]
        == 2
    )
    assert client.get("/v1/adapters", params={"task": "unknown"}).json()["total"] == 0
    assert client.get("/v1/adapters", params={"version": 1}).status_code == 400


def test_download_round_trip_same_files_same_sha256(
    client, tiny_model_dir, task_dir, lora_adapter_dir, tmp_path
):
    _setup(client, tiny_model_dir, task_dir)
    adapter = register_adapter(client, lora_adapter_dir)
    response = client.get(f"/v1/adapters/{adapter['id']}/download")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/gzip"
    assert f"adapter-{adapter['id']}.tar.gz" in response.headers["content-disposition"]
    assert response.headers["x-artifact-fingerprint"] == adapter["fingerprint"]
    with tarfile.open(fileobj=io.BytesIO(response.content)) as archive:
        archive.extractall(tmp_path, filter="data")
    downloaded = tmp_path / f"adapter-{adapter['id']}"
    original = {
        p.relative_to(lora_adapter_dir).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in lora_adapter_dir.rglob("*")
        if p.is_file()
    }
    got = {
        p.relative_to(downloaded).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in downloaded.rglob("*")
        if p.is_file()
    }
    assert got == original == adapter["manifest"]
    assert not any((tmp_path / "data" / "tmp").glob("download-*"))  # scratch copy removed
    # PEFT loads the downloaded directory as is.
    import peft

    assert peft.PeftConfig.from_pretrained(downloaded).peft_type == "LORA"


def test_tampered_artifact_is_detected_on_download(
    client, store, tiny_model_dir, task_dir, lora_adapter_dir
):
    _setup(client, tiny_model_dir, task_dir)
    adapter = register_adapter(client, lora_adapter_dir)
    stored = store.local_directory(adapter["artifact_uri"])
    (stored / "adapter_config.json").write_text("{}")
    response = client.get(f"/v1/adapters/{adapter['id']}/download")
    assert response.status_code == 500 and response.json()["error"] == "ArtifactCorrupted"


def test_adapter_aliases_move_and_soft_delete_drops_them(
    client, tiny_model_dir, task_dir, lora_adapter_dir
):
    _setup(client, tiny_model_dir, task_dir)
    first = register_adapter(client, lora_adapter_dir)
    second = register_adapter(client, lora_adapter_dir)
    set_first = client.patch(
        f"/v1/adapters/{first['id']}", json={"aliases": {"add": ["production"]}, "name": "v1"}
    )
    assert set_first.json()["aliases"] == ["production"] and set_first.json()["name"] == "v1"
    client.patch(f"/v1/adapters/{second['id']}", json={"aliases": {"add": ["production"]}})
    assert client.get(f"/v1/adapters/{first['id']}").json()["aliases"] == []
    production = client.get(
        "/v1/adapters",
        params={"model": "tiny", "version": 1, "task": "topics", "alias": "production"},
    ).json()
    assert [item["id"] for item in production["items"]] == [second["id"]]

    assert client.delete(f"/v1/adapters/{second['id']}").status_code == 204
    assert client.get(f"/v1/adapters/{second['id']}").status_code == 404
    assert client.get("/v1/adapters", params={"alias": "production"}).json()["total"] == 0
    assert client.get("/v1/adapters").json()["total"] == 1


def test_incompatible_adapter_is_refused_naming_the_module(
    client, tiny_model_dir, task_dir, wide_lora_adapter_dir, registry_state
):
    _setup(client, tiny_model_dir, task_dir)
    before = registry_state()
    response = register_adapter(client, wide_lora_adapter_dir, expect=400)
    assert response["error"] == "IncompatibleAdapter"
    assert response.get("field")
    assert registry_state() == before


def test_label_set_mismatch_is_refused(
    client, tiny_model_dir, task_dir, lora_adapter_dir, tmp_path, registry_state
):
    _setup(client, tiny_model_dir, task_dir)
    relabelled = tmp_path / "relabelled"
    shutil.copytree(lora_adapter_dir, relabelled)
    (relabelled / "label2id.json").write_text('{"a": 0, "b": 1, "c": 2}')
    before = registry_state()
    response = register_adapter(client, relabelled, expect=400)
    assert response["error"] == "IncompatibleAdapter" and response["field"] == "labels"
    assert registry_state() == before


def test_malformed_adapter_and_unknown_references(
    client, tiny_model_dir, task_dir, lora_adapter_dir, tmp_path, registry_state
):
    _setup(client, tiny_model_dir, task_dir)
    register_adapter(client, lora_adapter_dir)
    broken = tmp_path / "broken"
    shutil.copytree(lora_adapter_dir, broken)
    (broken / "adapter_model.safetensors").unlink()
    before = registry_state()
    assert register_adapter(client, broken, expect=400)["error"] == "InvalidAdapter"
    pickled = tmp_path / "pickled"
    shutil.copytree(lora_adapter_dir, pickled)
    (pickled / "adapter_model.bin").write_bytes(b"\x80\x04K\x01.")
    assert register_adapter(client, pickled, expect=400)["error"] == "UnsafeFile"
    assert (
        register_adapter(client, lora_adapter_dir, version=9, expect=404)["error"]
        == "VersionNotFound"
    )
    assert (
        register_adapter(client, lora_adapter_dir, task="nope", expect=404)["error"]
        == "TaskNotFound"
    )
    assert registry_state() == before
    assert client.get("/v1/adapters/does-not-exist").status_code == 404


def test_jobs_register_recycled_adapters_with_lineage(
    db, store, tiny_model_dir, task_dir, lora_adapter_dir, tmp_path
):
    """The service call a job uses to add its output: lineage, metrics, and a verified fetch."""
    from app.adapters import service as adapters_service
    from app.db.session import transaction
    from app.models import service as models_service
    from app.reports import service as reports_service
    from app.tasks import service as tasks_service
    from recycling_core.files import file_manifest
    from recycling_core.reports import Report

    with transaction(db.session_factory) as session:
        model = models_service.create_model(session, "tiny")
        v1 = models_service.register_version_from_directory(
            session, store, model=model, directory=tiny_model_dir
        )
        v2 = models_service.register_version_from_directory(
            session, store, model=model, directory=tiny_model_dir, parent=v1
        )
        task = tasks_service.register_task_from_directory(
            session, store, name="topics", directory=task_dir
        )
        source = adapters_service.register_adapter_from_directory(
            session, store, directory=lora_adapter_dir, model_version=v1, task=task
        )
        recycled = adapters_service.register_adapter_from_directory(
            session,
            store,
            directory=lora_adapter_dir,
            model_version=v2,
            task=task,
            recycled_from=source,
            method="init",
            metrics={"accuracy": 0.9},
        )
        report = reports_service.store_report(
            session, Report(kind="recycle", method="init", output={"adapter_id": recycled.id})
        )
        recycled_id, report_id = recycled.id, report.id

    with transaction(db.session_factory) as session:
        recycled = adapters_service.get_adapter(session, recycled_id)
        assert recycled.lineage_version == 2 and recycled.method == "init"
        assert recycled.recycled_from_id == source.id and recycled.metrics == {"accuracy": 0.9}
        fetched = adapters_service.fetch_adapter_directory(store, recycled, tmp_path / "fetched")
        assert file_manifest(fetched) == file_manifest(lora_adapter_dir)
        task_copy = tasks_service.fetch_task_directory(store, recycled.task, tmp_path / "task")
        assert (task_copy / "train.jsonl").read_bytes() == (task_dir / "train.jsonl").read_bytes()
        assert (
            reports_service.get_report(session, report_id).document["output"]["adapter_id"]
            == recycled_id
        )
