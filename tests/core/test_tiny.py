"""Tests of recycling_core.tiny: offline tokenizers, tiny models, synthetic task and corpora."""

from __future__ import annotations

import os

# Local directories only: any attempt to reach the Hub must fail instead of downloading.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from collections import Counter
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)

from recycling_core.data import load_task, majority_floor
from recycling_core.files import file_manifest, refuse_pickle_files
from recycling_core.tiny import (
    BUILTIN_VOCABULARY,
    TOPIC_KEYWORDS,
    build_word_tokenizer,
    make_corpus,
    make_synthetic_task,
    make_tiny_model,
)


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("encoder"), kind="encoder", seed=0)


@pytest.fixture(scope="module")
def causal_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("causal"), kind="causal", seed=0)


def test_builtin_vocabulary_is_unique_lowercase_and_about_300_words() -> None:
    assert len(BUILTIN_VOCABULARY) == len(set(BUILTIN_VOCABULARY))
    assert 250 <= len(BUILTIN_VOCABULARY) <= 350
    assert all(word == word.lower() for word in BUILTIN_VOCABULARY)
    assert {"positive", "negative", "sports", "science", "music"} <= set(BUILTIN_VOCABULARY)


def test_encoder_tokenizer_round_trip(tmp_path: Path) -> None:
    tokenizer = build_word_tokenizer(BUILTIN_VOCABULARY, "encoder")
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    encoded = loaded("The team made a goal, again!")
    tokens = loaded.convert_ids_to_tokens(encoded["input_ids"])
    assert tokens == ["[CLS]", "the", "team", "made", "a", "goal", ",", "again", "!", "[SEP]"]
    decoded = loaded.decode(encoded["input_ids"], skip_special_tokens=True)
    assert decoded == "the team made a goal, again!"
    assert loaded.convert_ids_to_tokens(loaded("zyzzyva")["input_ids"]) == [
        "[CLS]",
        "[UNK]",
        "[SEP]",
    ]
    assert loaded.pad_token_id == 0 and loaded.unk_token_id == 1 and loaded.mask_token == "[MASK]"
    pair = loaded("the song", "a band")
    assert pair["token_type_ids"] == [0, 0, 0, 0, 1, 1, 1]


def test_causal_tokenizer_prepends_bos_and_round_trips(tmp_path: Path) -> None:
    tokenizer = build_word_tokenizer(BUILTIN_VOCABULARY, "causal")
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    text = "the piano song, again!"
    ids = loaded(text)["input_ids"]
    assert ids[0] == loaded.bos_token_id
    assert loaded.eos_token_id not in ids
    assert loaded.decode(ids, skip_special_tokens=True) == text
    prompt_tokens = loaded.convert_ids_to_tokens(loaded("topic of: music")["input_ids"])
    assert prompt_tokens == ["<s>", "topic", "of", ":", "music"]
    assert "token_type_ids" not in loaded(text)


def _has_no_pickle(directory: Path) -> None:
    names = list(file_manifest(directory))
    assert "model.safetensors" in names
    assert not [name for name in names if name.endswith(".bin")]
    refuse_pickle_files(directory)


def test_tiny_encoder_loads_with_auto_classes_offline(encoder_dir: Path) -> None:
    _has_no_pickle(encoder_dir)
    tokenizer = AutoTokenizer.from_pretrained(encoder_dir, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(
        encoder_dir, num_labels=3, local_files_only=True
    )
    assert model.config.architectures == ["BertForMaskedLM"]
    assert model.config.pad_token_id == tokenizer.pad_token_id
    batch = tokenizer(["the ball", "a song for you"], padding=True, return_tensors="pt")
    with torch.no_grad():
        assert model(**batch).logits.shape == (2, 3)
    mlm = AutoModelForMaskedLM.from_pretrained(encoder_dir, local_files_only=True)
    assert mlm.config.vocab_size == len(tokenizer)


def test_tiny_encoder_saves_its_pooler(encoder_dir: Path) -> None:
    _, loading_info = AutoModelForSequenceClassification.from_pretrained(
        encoder_dir, num_labels=2, local_files_only=True, output_loading_info=True
    )
    assert sorted(loading_info["missing_keys"]) == ["classifier.bias", "classifier.weight"]


def test_tiny_causal_loads_with_auto_classes_offline(causal_dir: Path) -> None:
    _has_no_pickle(causal_dir)
    tokenizer = AutoTokenizer.from_pretrained(causal_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(causal_dir, local_files_only=True)
    assert model.config.tie_word_embeddings is False
    assert model.config.pad_token_id == tokenizer.pad_token_id
    batch = tokenizer(["the ball", "a song for you"], padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (2, batch["input_ids"].shape[1], len(tokenizer))


def test_same_seed_gives_identical_weights(tmp_path: Path, encoder_dir: Path) -> None:
    again = make_tiny_model(tmp_path / "again", kind="encoder", seed=0)
    other = make_tiny_model(tmp_path / "other", kind="encoder", seed=1)
    weights = file_manifest(encoder_dir)["model.safetensors"]
    assert file_manifest(again)["model.safetensors"] == weights
    assert file_manifest(other)["model.safetensors"] != weights


def test_make_tiny_model_leaves_the_global_torch_rng_alone(tmp_path: Path) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    make_tiny_model(tmp_path / "m", kind="causal", seed=5, num_layers=1)
    assert torch.equal(torch.rand(3), expected)


def test_synthetic_classification_task_loads_and_is_balanced(tmp_path: Path) -> None:
    directory = make_synthetic_task(tmp_path / "task", n_train=300, n_dev=90, n_test=90, seed=0)
    task = load_task(directory)
    assert task.kind == "classification"
    assert task.labels == ("sports", "science", "music")
    assert (len(task.train), len(task.dev), len(task.test)) == (300, 90, 90)
    assert majority_floor(task.train) < 0.5
    assert majority_floor(task.dev) < 0.5
    for example in task.train:
        words = example.text.split()
        assert 6 <= len(words) <= 14
        counts = Counter(
            topic for word in words for topic, keys in TOPIC_KEYWORDS.items() if word in keys
        )
        assert counts.most_common(1)[0][0] == example.label
        assert counts[example.label] > max(
            (n for topic, n in counts.items() if topic != example.label), default=0
        )


def test_synthetic_task_is_deterministic(tmp_path: Path) -> None:
    first = make_synthetic_task(tmp_path / "a", n_train=50, n_dev=10, n_test=10, seed=3)
    second = make_synthetic_task(tmp_path / "b", n_train=50, n_dev=10, n_test=10, seed=3)
    assert load_task(first).fingerprints() == load_task(second).fingerprints()


def test_synthetic_generation_task_uses_topic_words_as_responses(tmp_path: Path) -> None:
    directory = make_synthetic_task(
        tmp_path / "gen", n_train=40, n_dev=10, n_test=10, kind="generation", num_labels=4
    )
    task = load_task(directory)
    assert task.kind == "generation"
    assert all(example.prompt.startswith("topic of: ") for example in task.train)
    assert {example.response for example in task.train} <= {"sports", "science", "music", "food"}


def test_corpora_of_the_two_domains_differ_in_word_frequencies(tmp_path: Path) -> None:
    corpus_a = make_corpus(tmp_path / "a.txt", n_lines=400, seed=0, domain="a")
    corpus_b = make_corpus(tmp_path / "b.txt", n_lines=400, seed=0, domain="b")
    lines_a = corpus_a.read_text().splitlines()
    assert len(lines_a) == 400
    assert make_corpus(tmp_path / "a2.txt", n_lines=400, seed=0, domain="a").read_text() == (
        corpus_a.read_text()
    )

    def topic_share(path: Path, topic: str) -> float:
        words = path.read_text().split()
        return sum(word in TOPIC_KEYWORDS[topic] for word in words) / len(words)

    assert topic_share(corpus_a, "sports") > 2 * topic_share(corpus_b, "sports")
    assert topic_share(corpus_b, "music") > 2 * topic_share(corpus_a, "music")
    assert set(corpus_a.read_text().split()) <= set(BUILTIN_VOCABULARY)
