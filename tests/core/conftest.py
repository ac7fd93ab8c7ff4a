"""Session fixtures of the recycling_core tests: tiny models, tasks, an upgrade and adapters.

Everything is built once per test session from seeds (no download): a tiny BERT-like encoder
and a tiny Llama-like causal LM (``v0``), their "upgraded" versions ``v1`` made by a few steps
of simulated continual pre-training, a synthetic topic-classification task and a generation
task, and LoRA adapters trained for a few steps on ``v0``. Tests copy what they modify.
"""

from __future__ import annotations

import os

# Local directories only: any attempt to reach the Hub must fail instead of downloading.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from pathlib import Path

import pytest
import torch
import transformers
from core_helpers import TRAIN_CONFIGS, TrainedAdapter, train

from recycling_core.reports import Report
from recycling_core.tiny import make_corpus, make_synthetic_task, make_tiny_model
from recycling_core.training import TrainingConfig
from recycling_core.upgrade import UpgradeConfig, UpgradeRequest, simulate_upgrade

# Tiny models gain nothing from intra-op threads, and on a shared 2-core machine the thread
# hand-offs make runs many times slower and their timings erratic.
torch.set_num_threads(1)
transformers.logging.set_verbosity_error()


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny")


@pytest.fixture(scope="session")
def corpus(tiny_root: Path) -> Path:
    return make_corpus(tiny_root / "corpus_b.txt", 400, seed=1, domain="b")


@pytest.fixture(scope="session")
def cls_task(tiny_root: Path) -> Path:
    return make_synthetic_task(tiny_root / "task_cls", n_train=128, n_dev=48, n_test=48, seed=0)


@pytest.fixture(scope="session")
def gen_task(tiny_root: Path) -> Path:
    return make_synthetic_task(
        tiny_root / "task_gen", n_train=128, n_dev=16, n_test=16, seed=0, kind="generation"
    )


@pytest.fixture(scope="session")
def encoder_v0(tiny_root: Path) -> Path:
    return make_tiny_model(tiny_root / "encoder_v0", kind="encoder", seed=0)


@pytest.fixture(scope="session")
def causal_v0(tiny_root: Path) -> Path:
    return make_tiny_model(tiny_root / "causal_v0", kind="causal", seed=0)


def _upgrade(base: Path, corpus: Path, out: Path) -> Report:
    config = UpgradeConfig(
        steps=8, batch_size=16, learning_rate=2e-3, max_length=32, head_warmup_steps=2, seed=0
    )
    return simulate_upgrade(UpgradeRequest(base, corpus, out, config))


@pytest.fixture(scope="session")
def encoder_upgrade(encoder_v0: Path, corpus: Path, tiny_root: Path) -> Report:
    return _upgrade(encoder_v0, corpus, tiny_root / "encoder_v1")


@pytest.fixture(scope="session")
def causal_upgrade(causal_v0: Path, corpus: Path, tiny_root: Path) -> Report:
    return _upgrade(causal_v0, corpus, tiny_root / "causal_v1")


@pytest.fixture(scope="session")
def encoder_v1(encoder_upgrade: Report) -> Path:
    return Path(encoder_upgrade.output["model_dir"])


@pytest.fixture(scope="session")
def causal_v1(causal_upgrade: Report) -> Path:
    return Path(causal_upgrade.output["model_dir"])


@pytest.fixture(scope="session")
def encoder_lora(
    tiny_root: Path, encoder_v0: Path, encoder_v1: Path, cls_task: Path
) -> TrainedAdapter:
    out = tiny_root / "encoder_lora"
    report = train(encoder_v0, cls_task, out, config=TRAIN_CONFIGS["encoder"])
    return TrainedAdapter("encoder", encoder_v0, encoder_v1, cls_task, out, report)


@pytest.fixture(scope="session")
def causal_lora(
    tiny_root: Path, causal_v0: Path, causal_v1: Path, cls_task: Path
) -> TrainedAdapter:
    out = tiny_root / "causal_lora"
    report = train(causal_v0, cls_task, out, config=TRAIN_CONFIGS["causal"])
    return TrainedAdapter("causal", causal_v0, causal_v1, cls_task, out, report)


@pytest.fixture(scope="session")
def causal_gen_lora(
    tiny_root: Path, causal_v0: Path, causal_v1: Path, gen_task: Path
) -> TrainedAdapter:
    out = tiny_root / "causal_gen_lora"
    config = TrainingConfig(steps=30, eval_every=15, batch_size=16, learning_rate=2e-2, seed=0)
    report = train(causal_v0, gen_task, out, config=config)
    return TrainedAdapter("causal", causal_v0, causal_v1, gen_task, out, report)


@pytest.fixture(scope="session", params=["encoder", "causal"])
def lora(request: pytest.FixtureRequest) -> TrainedAdapter:
    """The classification LoRA adapter of each model kind."""
    adapter: TrainedAdapter = request.getfixturevalue(f"{request.param}_lora")
    # a trained adapter, not its untrained start (the best dev checkpoint is kept)
    assert adapter.report.curve.best_step > 0, adapter.report.curve
    return adapter
