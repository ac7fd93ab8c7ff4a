"""An outside platform's script: it speaks only HTTP to the service, and plain PEFT locally.

It registers v1, a task and an adapter produced by plain PEFT, registers v2 with parent v1, sees
the campaign start by itself, follows it to the end, downloads the recycled adapter, loads it with
plain ``peft.PeftModel.from_pretrained`` on v2 and reproduces the reported test accuracy.

Nothing here imports the service or recycling_core: only httpx, torch, transformers and peft.

Usage: python tests/integration/http_upgrade_story.py URL API_KEY V1_DIR V2_DIR TASK_DIR ADAPTER_DIR WORK_DIR
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import httpx


def tar_gz(directory: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                archive.add(path, arcname=path.relative_to(directory).as_posix())
    return buffer.getvalue()


def expect(response: httpx.Response, status: int) -> Any:
    if response.status_code != status:
        raise AssertionError(f"{response.request.method} {response.request.url}: {response.status_code} {response.text}")
    return response.json() if response.content else None


def plain_peft_accuracy(v2_dir: Path, adapter_dir: Path, task_dir: Path) -> float:
    """Test accuracy of the downloaded adapter on v2, computed with plain transformers + PEFT."""
    import peft
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    label2id = json.loads((adapter_dir / "label2id.json").read_text())
    base = AutoModelForSequenceClassification.from_pretrained(v2_dir, num_labels=len(label2id))
    model = peft.PeftModel.from_pretrained(base, str(adapter_dir)).eval()
    tokenizer = AutoTokenizer.from_pretrained(v2_dir)
    rows = [json.loads(line) for line in (task_dir / "test.jsonl").read_text().splitlines() if line.strip()]
    correct = 0
    with torch.no_grad():
        for row in rows:
            encoded = tokenizer(row["text"], truncation=True, max_length=128, return_tensors="pt")
            prediction = int(model(**encoded).logits.argmax(dim=-1))
            correct += prediction == label2id[str(row["label"])]
    return correct / len(rows)


def run(url: str, api_key: str, v1: Path, v2: Path, task: Path, adapter: Path, work: Path, timeout: float = 600.0) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=120.0) as http:
        model = f"story-{int(time.time() * 1000)}"
        expect(http.post("/v1/models", json={"name": model}), 201)
        expect(http.post(f"/v1/models/{model}/versions", files={"file": ("v1.tar.gz", tar_gz(v1), "application/gzip")}), 201)
        expect(
            http.put(
                f"/v1/models/{model}/policy",
                json={
                    "methods": ["init"],
                    "step_budget": 30,
                    "fresh_baseline": False,
                    "gates": {"direct_min_retention": None},
                    "training": {"eval_every": 10, "learning_rate": 0.005},
                },
            ),
            200,
        )
        files = {split: (f"{split}.jsonl", (task / f"{split}.jsonl").read_bytes(), "application/jsonl") for split in ("train", "dev", "test")}
        task_name = f"{model}-task"
        label2id = json.loads((adapter / "label2id.json").read_text())
        labels = sorted(label2id, key=label2id.__getitem__)  # the task's label order is the adapter's
        expect(http.post("/v1/tasks", data={"name": task_name, "labels": json.dumps(labels)}, files=files), 201)
        source = expect(
            http.post(
                "/v1/adapters",
                data={"model": model, "version": "1", "task": task_name},
                files={"file": ("adapter.tar.gz", tar_gz(adapter), "application/gzip")},
            ),
            201,
        )
        v2_row = expect(
            http.post(
                f"/v1/models/{model}/versions",
                data={"parent_version": "1"},
                files={"file": ("v2.tar.gz", tar_gz(v2), "application/gzip")},
            ),
            201,
        )
        assert v2_row["parent_version"] == 1, v2_row

        deadline = time.monotonic() + timeout
        campaign = None
        while campaign is None:
            items = expect(http.get("/v1/campaigns", params={"model": model}), 200)["items"]
            campaign = next((c for c in items if c["to_version"] == 2), None)
            if campaign is None:
                assert time.monotonic() < deadline, "no campaign started by itself"
                time.sleep(0.5)
        while campaign["status"] not in {"SUCCEEDED", "FAILED", "PARTIAL"}:
            assert time.monotonic() < deadline, f"campaign still {campaign['status']}"
            time.sleep(1.0)
            campaign = expect(http.get(f"/v1/campaigns/{campaign['id']}"), 200)
        assert campaign["status"] == "SUCCEEDED", json.dumps(campaign, indent=2)

        entry = campaign["summary"]["adapters"][source["id"]]
        recycled_id = entry["methods"]["init"]["adapter_id"]
        recycled = expect(http.get(f"/v1/adapters/{recycled_id}"), 200)
        assert recycled["recycled_from"] == source["id"] and recycled["method"] == "init", recycled
        report = expect(http.get(f"/v1/reports/{recycled['metrics']['report_id']}"), 200)
        reported = report["document"]["metrics"]["test"]["accuracy"]

        archive = http.get(f"/v1/adapters/{recycled_id}/download")
        assert archive.status_code == 200, archive.text
        target = work / "downloaded"
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as bundle:
            bundle.extractall(target, filter="data")
        adapter_dir = next(target.rglob("adapter_config.json")).parent  # the archive has one top folder
        reproduced = plain_peft_accuracy(v2, adapter_dir, task)
        return {"campaign": campaign, "reported": reported, "reproduced": reproduced, "adapter_dir": str(adapter_dir)}


if __name__ == "__main__":
    result = run(sys.argv[1], sys.argv[2], *(Path(arg) for arg in sys.argv[3:8]))
    print(json.dumps({"reported": result["reported"], "reproduced": result["reproduced"]}))
