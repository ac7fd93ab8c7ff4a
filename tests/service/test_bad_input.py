"""Bad input, swept over the OpenAPI document and over mismatched adapters.

Each case asserts its status AND error code, and that nothing stored before changed (every
registry row and every artifact file with its sha256, ``registry_state``). Archive attacks,
pickles, oversize bodies, datasets, duplicates and the hidden-size / label-set mismatches live
beside the endpoints they hit (test_archives.py, test_models_api.py, test_tasks_api.py,
test_adapters_api.py); this module adds the sweeps and the remaining adapter mismatches.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from svc_helpers import create_model, create_task, register_adapter, register_version
from test_access_control import _url, operations

JSON_OPERATIONS = "application/json"
MULTIPART = "multipart/form-data"


@pytest.fixture
def populated(client, tiny_model_dir, task_dir, lora_adapter_dir):  # type: ignore[no-untyped-def]
    create_model(client)
    register_version(client, tiny_model_dir, aliases=["production"])
    create_task(client, task_dir)
    return register_adapter(client, lora_adapter_dir)


def _body_operations(app, media_type: str):  # type: ignore[no-untyped-def]
    for method, path, operation in operations(app):
        content = operation.get("requestBody", {}).get("content", {})
        if media_type in content:
            yield method, path, operation


def test_malformed_json_is_422_everywhere_and_changes_nothing(
    app, client, populated, registry_state
):  # type: ignore[no-untyped-def]
    before = registry_state()
    checked = 0
    for method, path, operation in _body_operations(app, JSON_OPERATIONS):
        url = _url(path, operation).replace("nothing-here", "tiny")
        for body, status, code in (
            (b'{"name": "x",', 422, "ValidationError"),
            (b"[1, 2", 422, "ValidationError"),
            (b"nan", 422, "ValidationError"),
            (b"", 422, "ValidationError"),
            (b"\xff\xfe\x00", 400, "BadRequest"),  # not even UTF-8
        ):
            response = client.request(
                method.upper(), url, content=body, headers={"Content-Type": "application/json"}
            )
            label = f"{method.upper()} {path} {body!r}"
            assert response.status_code == status, (label, response.text)
            assert response.json()["error"] == code, label
        checked += 1
    assert checked >= 9  # every JSON-body operation of the document
    assert registry_state() == before


@pytest.mark.parametrize(
    "content_type, body",
    [
        ("text/plain", b'{"name": "sneaky"}'),
        ("application/x-www-form-urlencoded", b"name=sneaky"),
        ("application/xml", b"<model><name>sneaky</name></model>"),
        (None, b'{"name": "sneaky"}'),
    ],
)
def test_wrong_content_type_for_json_is_422(client, populated, registry_state, content_type, body):  # type: ignore[no-untyped-def]
    before = registry_state()
    headers = {"Content-Type": content_type} if content_type else {}
    for path in ("/v1/models", "/v1/keys", "/v1/webhooks", "/v1/jobs", "/v1/campaigns"):
        response = client.post(path, content=body, headers=headers)
        assert response.status_code == 422, (path, content_type, response.text)
        assert response.json()["error"] == "ValidationError"
    assert registry_state() == before


def test_json_sent_to_upload_endpoints_is_422(app, client, populated, registry_state):  # type: ignore[no-untyped-def]
    before = registry_state()
    for _method, path, operation in _body_operations(app, MULTIPART):
        url = _url(path, operation).replace("nothing-here", "tiny")
        response = client.post(url, json={"name": "x", "task": "topics", "model": "tiny"})
        assert response.status_code in (400, 422), (path, response.text)
        assert response.json()["error"] in ("ValidationError", "InvalidSource", "BadRequest")
    response = client.post("/v1/tasks", json={"name": "x"})
    assert response.status_code == 422 and response.json()["error"] == "ValidationError"
    assert registry_state() == before


def test_unknown_ids_are_404_on_every_operation(app, client, populated, registry_state):  # type: ignore[no-untyped-def]
    """Every operation with a path parameter, pointed at something that does not exist."""
    before = registry_state()
    checked = 0
    for method, path, operation in operations(app):
        if "{" not in path:
            continue
        content = operation.get("requestBody", {}).get("content", {})
        kwargs = {"json": {}} if JSON_OPERATIONS in content else {}
        response = client.request(method.upper(), _url(path, operation), **kwargs)
        label = f"{method.upper()} {path}"
        assert response.status_code == 404, (label, response.status_code, response.text)
        assert response.json()["error"].endswith("NotFound"), (label, response.text)
        checked += 1
    assert checked >= 20
    # An unknown version of a known model, and an unknown alias, are 404 too.
    assert client.get("/v1/models/tiny/versions/99").json()["error"] == "VersionNotFound"
    assert client.get("/v1/models/tiny/aliases/nope").json()["error"] == "AliasNotFound"
    assert registry_state() == before


# --------------------------------------------------------------------------- adapters that do not fit


def _lora(base_dir: Path, out_dir: Path, labels: list[str], *, causal: bool = False) -> Path:
    import peft
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    torch.manual_seed(0)
    if causal:
        base = AutoModelForCausalLM.from_pretrained(base_dir)
        config = peft.LoraConfig(task_type="CAUSAL_LM", r=4, target_modules=["q_proj", "v_proj"])
    else:
        base = AutoModelForSequenceClassification.from_pretrained(base_dir, num_labels=len(labels))
        config = peft.LoraConfig(task_type="SEQ_CLS", r=4, target_modules=["query", "value"])
    peft.get_peft_model(base, config).save_pretrained(out_dir)
    (out_dir / "label2id.json").write_text(json.dumps({label: i for i, label in enumerate(labels)}))
    return out_dir


@pytest.fixture(scope="module")
def mismatched_adapters(tmp_path_factory, lora_adapter_dir, task_labels):  # type: ignore[no-untyped-def]
    """Adapters for another architecture, another vocabulary, and missing target modules."""
    from safetensors.torch import load_file, save_file

    from recycling_core.adapters import write_provenance
    from recycling_core.models import inspect_model_dir
    from recycling_core.tiny import BUILTIN_VOCABULARY, make_tiny_model

    root = tmp_path_factory.mktemp("mismatched")
    causal = make_tiny_model(root / "causal", "causal", seed=0)
    words = list(BUILTIN_VOCABULARY)
    words[words.index("football")] = "cricket"  # same size, another token→id map
    other_vocab = make_tiny_model(root / "other-vocab", "encoder", seed=0, vocabulary=words)
    missing = root / "missing-target"  # LoRA weights for layer 9 of a 2-layer model
    shutil.copytree(lora_adapter_dir, missing)
    weights = missing / "adapter_model.safetensors"
    tensors = load_file(weights)
    save_file({k.replace("layer.0.", "layer.9."): v for k, v in tensors.items()}, weights)
    vocabulary = _lora(other_vocab, root / "a-vocab", task_labels)
    # A plain PEFT directory does not say which tokenizer its base had; an adapter produced by
    # this service records it (recycling.json), and that record is what the check compares.
    write_provenance(vocabulary, {"base_signature": inspect_model_dir(other_vocab).signature})
    return {
        "architecture": _lora(causal, root / "a-causal", task_labels, causal=True),
        "vocabulary": vocabulary,
        "target_modules": missing,
    }


@pytest.mark.parametrize(
    "case, fragment",
    [
        ("architecture", ""),
        ("vocabulary", "vocab"),
        ("target_modules", "layer.9"),
    ],
)
def test_adapter_that_does_not_fit_the_version_is_refused(
    client, populated, mismatched_adapters, registry_state, case, fragment
):  # type: ignore[no-untyped-def]
    before = registry_state()
    body = register_adapter(client, mismatched_adapters[case], expect=400)
    assert body["error"] == "IncompatibleAdapter", body
    assert body.get("field"), body  # names the mismatching module or field
    assert fragment in (body["detail"] + body["field"]), body
    assert registry_state() == before
    assert client.get("/v1/adapters").json()["total"] == 1


# --------------------------------------------------------------------------- values found by fuzzing


def test_values_the_database_cannot_hold_are_4xx_not_500(client, db, populated, registry_state):  # type: ignore[no-untyped-def]
    """Found by schemathesis: NUL bytes and integers past the INTEGER column were 500s."""
    before = registry_state()
    for path in (
        "/v1/models/tiny/versions/99999999999",
        "/v1/models/tiny/versions/-70368744177665",
        "/v1/webhooks/4294967296",
        "/v1/models?offset=36893488147419103232",
        "/v1/adapters?version_id=697604858147718641483776",
    ):
        response = client.get(path)
        assert response.status_code == 422, (path, response.text)
        assert response.json()["error"] == "ValidationError"
    response = client.post(
        "/v1/jobs",
        json={"kind": "compatibility", "params": {"adapter_id": "x", "to_version_id": 2**40}},
    )
    assert response.status_code == 422 and response.json()["error"] == "ValidationError"

    nul_name = client.get("/v1/models/a%00b")
    nul_text = client.post("/v1/models", json={"name": "with-nul", "description": "a\u0000b"})
    if db.backend == "postgresql":  # PostgreSQL text cannot hold NUL: refused, not a crash
        assert nul_name.status_code == 400 and nul_name.json()["error"] == "InvalidValue"
        assert nul_text.status_code == 400 and nul_text.json()["error"] == "InvalidValue"
        assert registry_state() == before
    else:
        assert nul_name.status_code == 404 and nul_text.status_code == 201
