"""Helpers shared by the service tests: archives, registrations, and stored-state snapshots."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from fastapi.testclient import TestClient

from app.db import Base


def tar_gz_of(directory: Path, top: str | None = "bundle", mode: str = "w:gz") -> bytes:
    """The directory as an archive, under one top-level folder (or flat with ``top=None``)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                relative = path.relative_to(directory).as_posix()
                archive.add(path, arcname=f"{top}/{relative}" if top else relative)
    return buffer.getvalue()


def zip_of(directory: Path, top: str | None = "bundle") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                relative = path.relative_to(directory).as_posix()
                archive.write(path, f"{top}/{relative}" if top else relative)
    return buffer.getvalue()


def create_model(client: TestClient, name: str = "tiny") -> dict[str, Any]:
    response = client.post("/v1/models", json={"name": name})
    assert response.status_code == 201, response.text
    return response.json()


def register_version(
    client: TestClient,
    model_dir: Path,
    model: str = "tiny",
    *,
    parent: int | None = None,
    aliases: list[str] | None = None,
    tags: dict[str, str] | None = None,
    expect: int = 201,
) -> dict[str, Any]:
    data: dict[str, str] = {}
    if parent is not None:
        data["parent_version"] = str(parent)
    if aliases is not None:
        data["aliases"] = json.dumps(aliases)
    if tags is not None:
        data["tags"] = json.dumps(tags)
    response = client.post(
        f"/v1/models/{model}/versions",
        data=data,
        files={"file": ("model.tar.gz", tar_gz_of(model_dir), "application/gzip")},
    )
    assert response.status_code == expect, response.text
    body: dict[str, Any] = response.json()
    return body


def create_task(
    client: TestClient, task_dir: Path, name: str = "topics", expect: int = 201
) -> dict[str, Any]:
    files = {
        split: (f"{split}.jsonl", (task_dir / f"{split}.jsonl").read_bytes(), "application/jsonl")
        for split in ("train", "dev", "test")
    }
    labels = json.loads((task_dir / "task.json").read_text())["labels"]
    response = client.post(
        "/v1/tasks", data={"name": name, "labels": json.dumps(labels)}, files=files
    )
    assert response.status_code == expect, response.text
    body: dict[str, Any] = response.json()
    return body


def register_adapter(
    client: TestClient,
    adapter_dir: Path,
    *,
    model: str = "tiny",
    version: int = 1,
    task: str = "topics",
    expect: int = 201,
    archive: bytes | None = None,
) -> dict[str, Any]:
    response = client.post(
        "/v1/adapters",
        data={"model": model, "version": str(version), "task": task},
        files={"file": ("adapter.tar.gz", archive or tar_gz_of(adapter_dir), "application/gzip")},
    )
    assert response.status_code == expect, response.text
    body: dict[str, Any] = response.json()
    return body


def stored_files(root: Path) -> dict[str, str]:
    """sha256 of every file under the artifact root (the store's whole content)."""
    if not root.exists():
        return {}
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def table_rows(session: sa.orm.Session) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every registry table, for before/after comparisons."""
    rows: dict[str, list[tuple[Any, ...]]] = {}
    for table in Base.metadata.sorted_tables:
        result = session.execute(sa.select(table).order_by(*table.primary_key.columns)).all()
        rows[table.name] = [tuple(row) for row in result]
    return rows
