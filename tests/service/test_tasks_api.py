"""Tasks over HTTP: upload splits, validation errors from recycling_core, lifecycle."""

from __future__ import annotations

import json

import pytest
from svc_helpers import create_task


def _files(task_dir, **replace: bytes):  # type: ignore[no-untyped-def]
    files = {}
    for split in ("train", "dev", "test"):
        content = replace.get(split, (task_dir / f"{split}.jsonl").read_bytes())
        files[split] = (f"{split}.jsonl", content, "application/jsonl")
    return files


def test_create_list_get_delete_task(client, task_dir, task_labels, store):
    task = create_task(client, task_dir)
    assert task["name"] == "topics" and task["kind"] == "classification"
    assert task["labels"] == task_labels and task["metric"] == "accuracy"
    assert set(task["splits"]) == {"train", "dev", "test"}
    assert task["splits"]["train"]["examples"] == 40
    # The stored split has the recorded sha256.
    import hashlib

    train = task["splits"]["train"]
    stored = b"".join(store.iter_bytes(task["artifact_uri"], train["file"]))
    assert hashlib.sha256(stored).hexdigest() == train["sha256"]
    assert stored == (task_dir / "train.jsonl").read_bytes()

    assert client.get("/v1/tasks").json()["total"] == 1
    assert client.get("/v1/tasks/topics").json()["fingerprint"] == task["fingerprint"]
    assert client.delete("/v1/tasks/topics").status_code == 204
    assert client.get("/v1/tasks/topics").status_code == 404
    assert client.get("/v1/tasks").json()["total"] == 0


def test_duplicate_task_is_409(client, task_dir):
    create_task(client, task_dir)
    response = create_task(client, task_dir, expect=409)
    assert response["error"] == "TaskExists"


def test_csv_splits_are_accepted(client, tmp_path):
    from recycling_core.tiny import make_synthetic_task

    directory = make_synthetic_task(tmp_path / "csv", n_train=20, n_dev=6, n_test=6, fmt="csv")
    files = {
        s: (f"{s}.csv", (directory / f"{s}.csv").read_bytes(), "text/csv")
        for s in ("train", "dev", "test")
    }
    response = client.post(
        "/v1/tasks", data={"name": "csv-topics", "kind": "classification"}, files=files
    )
    assert response.status_code == 201, response.text
    assert response.json()["splits"]["dev"]["file"] == "dev.csv"


@pytest.mark.parametrize(
    ("case", "replace", "fragment"),
    [
        ("empty_split", {"dev": b""}, "dev"),
        (
            "unknown_label",
            {"test": b'{"text": "hello there", "label": "cooking"}\n'},
            "unknown label",
        ),
        ("malformed_jsonl", {"train": b'{"text": "a", "label": \n'}, "train"),
        ("unknown_dev_label", {"dev": b'{"text": "hello there", "label": "cooking"}\n'}, "dev"),
        ("label_less", {"train": b'{"text": "a b"}\n{"text": "c d"}\n'}, "columns"),
        ("null_label", {"train": b'{"text": "a b", "label": null}\n'}, "label"),
        ("all_empty", {"train": b"", "dev": b"", "test": b""}, "empty"),
        ("blank_lines_only", {"train": b"\n\n  \n"}, "empty"),
    ],
)
def test_invalid_dataset_is_400_and_nothing_stored(
    client, task_dir, task_labels, registry_state, case, replace, fragment
):
    before = registry_state()
    response = client.post(
        "/v1/tasks",
        data={"name": f"bad-{case}", "labels": json.dumps(task_labels)},
        files=_files(task_dir, **replace),
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "InvalidDataset"
    assert fragment in response.json()["detail"]
    assert registry_state() == before


def test_missing_split_and_wrong_extension_are_400(client, task_dir):
    files = _files(task_dir)
    del files["test"]
    response = client.post("/v1/tasks", data={"name": "nosplit"}, files=files)
    assert response.status_code == 400 and response.json()["error"] == "InvalidDataset"
    assert "test" in response.json()["detail"]

    files = _files(task_dir)
    files["dev"] = ("dev.parquet", b"PAR1", "application/octet-stream")
    response = client.post("/v1/tasks", data={"name": "parquet"}, files=files)
    assert response.status_code == 400 and response.json()["error"] == "InvalidDataset"


def test_labels_field_must_be_a_json_list(client, task_dir):
    response = client.post(
        "/v1/tasks", data={"name": "t", "labels": '"one"'}, files=_files(task_dir)
    )
    assert response.status_code == 422 and response.json()["error"] == "ValidationError"
