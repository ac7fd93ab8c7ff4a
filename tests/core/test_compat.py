"""Every structural compatibility error names its problem; nothing loads partially."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from core_helpers import TrainedAdapter, clone, edit_adapter_tensors, load_base
from typer.testing import CliRunner

from recycling_core.adaptation import attach_adapter
from recycling_core.adapters import (
    ADAPTER_CONFIG_NAME,
    ADAPTER_WEIGHTS_NAME,
    LABELS_NAME,
    PROVENANCE_NAME,
    inspect_adapter_dir,
)
from recycling_core.cli import EXIT_INCOMPATIBLE, app
from recycling_core.compat import check_compatibility
from recycling_core.data import load_task
from recycling_core.errors import IncompatibleAdapterError, InvalidAdapterError, UnsafeFileError
from recycling_core.models import inspect_model_dir
from recycling_core.pipeline import RecycleRequest, recycle_adapter
from recycling_core.tiny import BUILTIN_VOCABULARY, make_synthetic_task, make_tiny_model
from recycling_core.training import TrainingConfig

LAYER_ZERO = {"encoder": "encoder.layer.0.", "causal": "layers.0."}
LAYER_NINE = {"encoder": "encoder.layer.9.", "causal": "layers.9."}
QUERY = {
    "encoder": "bert.encoder.layer.0.attention.self.query",
    "causal": "model.layers.0.self_attn.q_proj",
}


def _raises(call, field: str, *words: str) -> IncompatibleAdapterError:
    """Call and expect IncompatibleAdapterError with ``field`` and a message naming ``words``."""
    with pytest.raises(IncompatibleAdapterError) as caught:
        call()
    error = caught.value
    assert error.field == field, (error.field, str(error))
    for word in words:
        assert word in str(error), (word, str(error))
    return error


# ----------------------------------------------------------------------------- happy path
def test_a_compatible_adapter_passes_every_check(lora: TrainedAdapter) -> None:
    labels = load_task(lora.task).labels
    result = check_compatibility(lora.adapter, lora.new, labels=labels)
    assert result.checks == ["model_class", "signature", "labels", "modules"]
    assert result.modules_checked == len(inspect_adapter_dir(lora.adapter).tensor_shapes)
    assert result.peft_type == "LORA"


# ----------------------------------------------------------------------------- hidden size
@pytest.fixture(scope="module")
def wide_bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("wide")
    return {
        kind: make_tiny_model(root / kind, kind=kind, hidden_size=48)
        for kind in ("encoder", "causal")
    }


def test_other_hidden_size(lora: TrainedAdapter, wide_bases: dict[str, Path]) -> None:
    wide = wide_bases[lora.kind]
    _raises(
        lambda: check_compatibility(lora.adapter, wide), "hidden_size", "hidden_size", "32", "48"
    )


def test_other_hidden_size_without_provenance_names_the_module(
    lora: TrainedAdapter, wide_bases: dict[str, Path], tmp_path: Path
) -> None:
    """An adapter made elsewhere (no recycling.json) is still caught, by the module shapes."""
    adapter = clone(lora.adapter, tmp_path / "foreign")
    (adapter / PROVENANCE_NAME).unlink()
    wide = wide_bases[lora.kind]
    _raises(
        lambda: check_compatibility(adapter, wide), QUERY[lora.kind], QUERY[lora.kind], "32", "48"
    )
    # attaching anyway is refused too, never a partial load
    with pytest.raises(IncompatibleAdapterError):
        attach_adapter(load_base(wide, lora.task), inspect_adapter_dir(adapter), trainable=False)


# ----------------------------------------------------------------------------- missing modules
def test_missing_target_module(lora: TrainedAdapter, tmp_path: Path) -> None:
    adapter = clone(lora.adapter, tmp_path / "layer9")
    old, new = LAYER_ZERO[lora.kind], LAYER_NINE[lora.kind]
    edit_adapter_tensors(
        adapter, lambda tensors: {k.replace(old, new): v for k, v in tensors.items()}
    )
    missing = QUERY[lora.kind].replace(old, new)
    error = _raises(lambda: check_compatibility(adapter, lora.new), missing, missing, "missing")
    assert re.search(r"layers?\.9", str(error))
    # attach_adapter, which the compatibility check normally guards, refuses it as well
    with pytest.raises(IncompatibleAdapterError) as caught:
        attach_adapter(
            load_base(lora.new, lora.task), inspect_adapter_dir(adapter), trainable=False
        )
    assert new in caught.value.field and "unused" in str(caught.value)  # the layer-9 tensors


def test_target_modules_of_the_config_missing_from_the_base(
    lora: TrainedAdapter, tmp_path: Path
) -> None:
    adapter = clone(lora.adapter, tmp_path / "bad_config")
    config = json.loads((adapter / ADAPTER_CONFIG_NAME).read_text())
    config["target_modules"] = ["query_proj_that_does_not_exist"]
    (adapter / ADAPTER_CONFIG_NAME).write_text(json.dumps(config))
    _raises(
        lambda: check_compatibility(adapter, lora.new),
        "target_modules",
        "query_proj_that_does_not_exist",
    )
    with pytest.raises(IncompatibleAdapterError):
        attach_adapter(
            load_base(lora.new, lora.task), inspect_adapter_dir(adapter), trainable=False
        )


# ----------------------------------------------------------------------------- vocabulary
@pytest.mark.parametrize("kind", ["encoder", "causal"])
def test_other_vocabulary(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    lora: TrainedAdapter = request.getfixturevalue(f"{kind}_lora")
    words = list(BUILTIN_VOCABULARY)
    words[words.index("football")] = "cricket"  # same size, another token→id map
    other = make_tiny_model(tmp_path / "same_size", kind=kind, vocabulary=words)
    assert (
        inspect_model_dir(other).signature["vocab_size"]
        == inspect_model_dir(lora.old).signature["vocab_size"]
    )
    _raises(
        lambda: check_compatibility(lora.adapter, other),
        "tokenizer_vocab_sha256",
        "tokenizer vocabulary",
    )

    bigger = make_tiny_model(
        tmp_path / "bigger", kind=kind, vocabulary=[*BUILTIN_VOCABULARY, "zebra", "yak"]
    )
    _raises(lambda: check_compatibility(lora.adapter, bigger), "vocab_size", "vocab_size")


# ----------------------------------------------------------------------------- label set
def test_other_label_set(lora: TrainedAdapter, tmp_path: Path) -> None:
    four = load_task(
        make_synthetic_task(tmp_path / "four", n_train=8, n_dev=8, n_test=8, num_labels=4)
    )
    _raises(
        lambda: check_compatibility(lora.adapter, lora.new, labels=four.labels),
        "labels",
        "label set",
        "food",
    )
    # the same labels in another id order are another label set too
    labels = load_task(lora.task).labels
    reordered = tuple(reversed(labels))
    _raises(
        lambda: check_compatibility(lora.adapter, lora.new, labels=reordered), "labels", "label set"
    )


def test_other_label_count_without_label_map(encoder_lora: TrainedAdapter, tmp_path: Path) -> None:
    """An encoder adapter made elsewhere (no label2id.json): its head's shape gives it away."""
    adapter = clone(encoder_lora.adapter, tmp_path / "no_labels")
    (adapter / LABELS_NAME).unlink()
    four = load_task(
        make_synthetic_task(tmp_path / "four", n_train=8, n_dev=8, n_test=8, num_labels=4)
    )
    _raises(
        lambda: check_compatibility(adapter, encoder_lora.new, labels=four.labels),
        "labels",
        "labels",
    )


def test_recycling_with_another_label_set_is_refused(
    encoder_lora: TrainedAdapter, tmp_path: Path
) -> None:
    four = make_synthetic_task(tmp_path / "four", n_train=8, n_dev=8, n_test=8, num_labels=4)
    request = RecycleRequest(
        "direct",
        encoder_lora.adapter,
        encoder_lora.old,
        encoder_lora.new,
        four,
        tmp_path / "out",
        training=TrainingConfig(steps=1),
    )
    _raises(lambda: recycle_adapter(request), "labels", "label set")
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- model class
def test_encoder_adapter_on_a_causal_base(encoder_lora: TrainedAdapter, causal_v1: Path) -> None:
    _raises(
        lambda: check_compatibility(encoder_lora.adapter, causal_v1),
        "model_class",
        "model class",
        "encoder",
        "causal",
    )


def test_causal_adapter_on_an_encoder_base(causal_lora: TrainedAdapter, encoder_v1: Path) -> None:
    _raises(
        lambda: check_compatibility(causal_lora.adapter, encoder_v1),
        "model_class",
        "model class",
        "causal",
        "encoder",
    )


# ----------------------------------------------------------------------------- pickles
def test_pickle_adapter_file_is_refused(encoder_lora: TrainedAdapter, tmp_path: Path) -> None:
    adapter = clone(encoder_lora.adapter, tmp_path / "pickled")
    torch.save({"x": torch.zeros(2)}, adapter / "adapter_model.bin")
    for call in (
        lambda: inspect_adapter_dir(adapter),
        lambda: check_compatibility(adapter, encoder_lora.new),
    ):
        with pytest.raises(UnsafeFileError) as caught:
            call()
        assert caught.value.field == "adapter_model.bin"
        assert "pickle" in str(caught.value) and "adapter_model.bin" in str(caught.value)


def test_pickle_renamed_to_safetensors_is_refused(
    encoder_lora: TrainedAdapter, tmp_path: Path
) -> None:
    adapter = clone(encoder_lora.adapter, tmp_path / "renamed")
    (adapter / ADAPTER_WEIGHTS_NAME).unlink()
    torch.save({"x": torch.zeros(2)}, adapter / ADAPTER_WEIGHTS_NAME)
    with pytest.raises(UnsafeFileError) as caught:
        inspect_adapter_dir(adapter)
    assert caught.value.field == ADAPTER_WEIGHTS_NAME
    assert "pickle" in str(caught.value)


def test_pickle_in_a_base_model_directory_is_refused(encoder_v0: Path, tmp_path: Path) -> None:
    model = clone(encoder_v0, tmp_path / "model")
    torch.save({"x": torch.zeros(2)}, model / "pytorch_model.bin")
    with pytest.raises(UnsafeFileError) as caught:
        inspect_model_dir(model)
    assert caught.value.field == "pytorch_model.bin"


def test_adapter_without_safetensors_weights_is_invalid(
    encoder_lora: TrainedAdapter, tmp_path: Path
) -> None:
    adapter = clone(encoder_lora.adapter, tmp_path / "empty")
    (adapter / ADAPTER_WEIGHTS_NAME).unlink()
    with pytest.raises(InvalidAdapterError) as caught:
        inspect_adapter_dir(adapter)
    assert caught.value.field == ADAPTER_WEIGHTS_NAME


# ----------------------------------------------------------------------------- strict attach
def test_unused_adapter_keys_are_an_error_on_attach(lora: TrainedAdapter, tmp_path: Path) -> None:
    """A tensor for a module the config does not target would be dropped by PEFT: refuse it."""
    adapter = clone(lora.adapter, tmp_path / "extra")
    query = QUERY[lora.kind]
    other = (
        query.replace("query", "key")
        if lora.kind == "encoder"
        else query.replace("q_proj", "k_proj")
    )
    extra = f"base_model.model.{other}.lora_A.weight"

    def add(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        tensors[extra] = tensors[f"base_model.model.{query}.lora_A.weight"].clone()
        return tensors

    edit_adapter_tensors(adapter, add)
    check_compatibility(adapter, lora.new)  # structurally the module exists with the right shape
    _raises(
        lambda: attach_adapter(
            load_base(lora.new, lora.task), inspect_adapter_dir(adapter), trainable=False
        ),
        extra,
        "unused",
    )


def test_missing_adapter_tensors_are_an_error_on_attach(
    lora: TrainedAdapter, tmp_path: Path
) -> None:
    adapter = clone(lora.adapter, tmp_path / "missing")
    dropped = f"base_model.model.{QUERY[lora.kind]}.lora_B.weight"
    edit_adapter_tensors(
        adapter, lambda tensors: {k: v for k, v in tensors.items() if k != dropped}
    )
    with pytest.raises(IncompatibleAdapterError) as caught:
        attach_adapter(
            load_base(lora.new, lora.task), inspect_adapter_dir(adapter), trainable=False
        )
    assert "missing" in str(caught.value)
    assert QUERY[lora.kind] in str(caught.value.field)


def test_a_missing_trained_head_is_an_error_on_attach(
    encoder_lora: TrainedAdapter, tmp_path: Path
) -> None:
    """A random classifier must never silently replace the trained one."""
    adapter = clone(encoder_lora.adapter, tmp_path / "headless")
    edit_adapter_tensors(
        adapter, lambda tensors: {k: v for k, v in tensors.items() if "classifier" not in k}
    )
    with pytest.raises(IncompatibleAdapterError) as caught:
        attach_adapter(
            load_base(encoder_lora.new, encoder_lora.task),
            inspect_adapter_dir(adapter),
            trainable=False,
        )
    assert "classifier" in str(caught.value.field)


# ----------------------------------------------------------------------------- command line
def _cli(*args: str):
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "400"})
    output = result.stdout + (result.stderr if hasattr(result, "stderr") else "")
    return result.exit_code, "".join(output.split())


def test_cli_check_exit_codes(
    encoder_lora: TrainedAdapter, wide_bases: dict[str, Path], tmp_path: Path
) -> None:
    code, output = _cli(
        "check",
        "--adapter",
        encoder_lora.adapter,
        "--base",
        encoder_lora.new,
        "--task",
        encoder_lora.task,
    )
    assert code == 0, output
    assert "compatible" in output

    code, output = _cli("check", "--adapter", encoder_lora.adapter, "--base", wide_bases["encoder"])
    assert code == EXIT_INCOMPATIBLE == 3
    assert "hidden_size" in output and "incompatible" in output

    four = make_synthetic_task(tmp_path / "four", n_train=8, n_dev=8, n_test=8, num_labels=4)
    code, output = _cli(
        "check", "--adapter", encoder_lora.adapter, "--base", encoder_lora.new, "--task", four
    )
    assert code == 3
    assert "labelset" in output  # whitespace is stripped from the output

    adapter = clone(encoder_lora.adapter, tmp_path / "layer9")
    edit_adapter_tensors(
        adapter, lambda t: {k.replace("layer.0.", "layer.9."): v for k, v in t.items()}
    )
    code, output = _cli("check", "--adapter", adapter, "--base", encoder_lora.new)
    assert code == 3
    assert "bert.encoder.layer.9.attention.self.query" in output

    code, output = _cli(
        "check", "--adapter", encoder_lora.adapter, "--base", encoder_lora.new, "--json"
    )
    assert code == 0
    assert json.loads(output)["compatible"] is True

    pickled = clone(encoder_lora.adapter, tmp_path / "pickled")
    torch.save({"x": torch.zeros(1)}, pickled / "adapter_model.bin")
    code, output = _cli("check", "--adapter", pickled, "--base", encoder_lora.new)
    assert code not in (0, 3)
    assert "adapter_model.bin" in output and "pickle" in output
