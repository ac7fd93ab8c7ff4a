"""Tests of recycling_core.data: task loading and its errors, sampling, bucketing, splitting."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from recycling_core.data import (
    Example,
    few_shot_sample,
    length_bucketed_batches,
    load_task,
    majority_floor,
    split_examples,
    write_task,
)
from recycling_core.errors import ConfigError, DatasetError

TRAIN = [
    {"text": "the match was great", "label": "sports"},
    {"text": "a new theory of atoms", "label": "science"},
    {"text": "the coach and the team", "label": "sports"},
    {"text": "the piano song", "label": "music"},
]
DEV = [{"text": "a long race", "label": "sports"}, {"text": "the band", "label": "music"}]
TEST = [{"text": "the gene", "label": "science"}, {"text": "a goal", "label": "sports"}]


def _write_lines(path: Path, rows: list[Any]) -> None:
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("".join(line + "\n" for line in lines))


def _task_dir(tmp_path: Path, **overrides: list[Any]) -> Path:
    """A valid JSONL classification task; ``overrides`` replace a split's raw lines."""
    directory = tmp_path / "task"
    directory.mkdir()
    splits = {"train": TRAIN, "dev": DEV, "test": TEST, **overrides}
    for split, rows in splits.items():
        _write_lines(directory / f"{split}.jsonl", rows)
    return directory


# --------------------------------------------------------------------------- loading


def test_load_task_infers_classification_and_sorted_labels(tmp_path: Path) -> None:
    task = load_task(_task_dir(tmp_path))
    assert task.kind == "classification"
    assert task.name == "task"
    assert task.labels == ("music", "science", "sports")
    assert task.label2id == {"music": 0, "science": 1, "sports": 2}
    assert task.id2label == {0: "music", 1: "science", 2: "sports"}
    assert task.train[0] == Example(text="the match was great", label="sports")
    assert len(task.train) == 4 and len(task.dev) == 2 and len(task.test) == 2
    assert task.metric == "accuracy"
    assert task.split("dev") == task.dev


def test_fingerprints_are_the_sha256_of_each_split_file(tmp_path: Path) -> None:
    directory = _task_dir(tmp_path)
    fingerprints = load_task(directory).fingerprints()
    assert set(fingerprints) == {"train", "dev", "test"}
    for split, digest in fingerprints.items():
        assert digest == hashlib.sha256((directory / f"{split}.jsonl").read_bytes()).hexdigest()


def test_task_json_sets_name_kind_label_order_and_metric(tmp_path: Path) -> None:
    directory = _task_dir(tmp_path)
    (directory / "task.json").write_text(
        json.dumps(
            {
                "name": "topics",
                "kind": "classification",
                "labels": ["sports", "science", "music"],
                "metric": "macro_f1",
            }
        )
    )
    task = load_task(directory)
    assert task.name == "topics"
    assert task.labels == ("sports", "science", "music")
    assert task.label2id["sports"] == 0
    assert task.metric == "macro_f1"


def test_integer_labels_become_strings_in_numeric_order(tmp_path: Path) -> None:
    train = [{"text": f"t{i}", "label": i} for i in (10, 2, 1, 2)]
    directory = _task_dir(
        tmp_path, train=train, dev=[{"text": "d", "label": 2}], test=[{"text": "e", "label": "10"}]
    )
    task = load_task(directory)
    assert task.labels == ("1", "2", "10")
    assert task.train[0].label == "10"


def test_csv_splits_load_and_integer_labels_are_strings(tmp_path: Path) -> None:
    directory = tmp_path / "csvtask"
    write_task(directory, "csvtask", "classification", TRAIN, DEV, TEST, fmt="csv")
    (directory / "test.csv").write_text('text,label\n"a, quoted text",sports\n')
    task = load_task(directory)
    assert task.test == [Example(text="a, quoted text", label="sports")]
    assert task.labels == ("music", "science", "sports")


def test_generation_task_is_inferred_from_columns(tmp_path: Path) -> None:
    rows = [{"prompt": "topic of: the song", "response": "music"}]
    directory = _task_dir(tmp_path, train=rows, dev=rows, test=rows)
    task = load_task(directory)
    assert task.kind == "generation"
    assert task.labels == () and task.label2id == {}
    assert task.train[0].prompt == "topic of: the song"
    assert task.train[0].response == "music"
    assert task.metric == "exact_match"


def test_kind_argument_contradicting_task_json_is_refused(tmp_path: Path) -> None:
    directory = _task_dir(tmp_path)
    (directory / "task.json").write_text(json.dumps({"kind": "classification"}))
    with pytest.raises(DatasetError, match="contradicts"):
        load_task(directory, kind="generation")


def test_write_task_round_trips_examples_and_labels(tmp_path: Path) -> None:
    train = [Example(text=row["text"], label=row["label"]) for row in TRAIN]
    directory = write_task(
        tmp_path / "w",
        "written",
        "classification",
        train,
        DEV,
        TEST,
        labels=["sports", "science", "music"],
    )
    task = load_task(directory)
    assert task.name == "written"
    assert task.train == train
    assert task.labels == ("sports", "science", "music")


def test_write_task_refuses_a_split_already_present_in_the_other_format(tmp_path: Path) -> None:
    directory = write_task(tmp_path / "w", "w", "classification", TRAIN, DEV, TEST, fmt="csv")
    with pytest.raises(DatasetError, match=r"train\.csv already exists"):
        write_task(directory, "w", "classification", TRAIN, DEV, TEST, fmt="jsonl")


# --------------------------------------------------------------------------- loading errors


def test_missing_split_is_named(tmp_path: Path) -> None:
    directory = _task_dir(tmp_path)
    (directory / "dev.jsonl").unlink()
    with pytest.raises(DatasetError, match="missing split 'dev'") as caught:
        load_task(directory)
    assert caught.value.field == "dev"


def test_split_given_as_jsonl_and_csv_is_refused(tmp_path: Path) -> None:
    directory = _task_dir(tmp_path)
    (directory / "test.csv").write_text("text,label\nx,sports\n")
    expected = r"split 'test' is given twice \(test.jsonl and test.csv\)"
    with pytest.raises(DatasetError, match=expected):
        load_task(directory)


def test_empty_split_is_named(tmp_path: Path) -> None:
    directory = _task_dir(tmp_path, test=["", "   "])
    with pytest.raises(DatasetError, match=r"split 'test' \(test.jsonl\) is empty"):
        load_task(directory)


def test_malformed_json_line_names_split_and_line(tmp_path: Path) -> None:
    directory = _task_dir(tmp_path, dev=[DEV[0], "", '{"text": "broken", "label": '])
    with pytest.raises(DatasetError, match="malformed JSON in dev line 3"):
        load_task(directory)


def test_json_line_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    directory = _task_dir(tmp_path, train=[*TRAIN, '["a", "b"]'])
    with pytest.raises(DatasetError, match=r"train line 5 .* JSON list, expected an object"):
        load_task(directory)


def test_missing_column_names_split_line_and_column(tmp_path: Path) -> None:
    directory = _task_dir(tmp_path, test=[TEST[0], {"text": "no label here"}])
    with pytest.raises(DatasetError, match="missing column 'label' in test line 2"):
        load_task(directory)


def test_missing_csv_column_names_split_and_line(tmp_path: Path) -> None:
    directory = write_task(tmp_path / "c", "c", "classification", TRAIN, DEV, TEST, fmt="csv")
    (directory / "dev.csv").write_text("text\nonly text\n")
    with pytest.raises(DatasetError, match="missing column 'label' in dev line 2"):
        load_task(directory)


def test_empty_text_names_split_and_line(tmp_path: Path) -> None:
    directory = _task_dir(tmp_path, train=[*TRAIN, {"text": "  ", "label": "sports"}])
    with pytest.raises(DatasetError, match="empty text in train line 5"):
        load_task(directory)


def test_empty_generation_response_is_refused(tmp_path: Path) -> None:
    rows = [{"prompt": "p", "response": "r"}]
    directory = _task_dir(tmp_path, train=rows, dev=rows, test=[{"prompt": "p", "response": ""}])
    with pytest.raises(DatasetError, match="empty response in test line 1"):
        load_task(directory)


def test_unknown_dev_label_names_label_split_and_line(tmp_path: Path) -> None:
    dev = [*DEV, *DEV, *DEV, {"text": "x", "label": "x"}]
    directory = _task_dir(tmp_path, dev=dev)
    with pytest.raises(DatasetError, match="unknown label 'x' in dev line 7") as caught:
        load_task(directory)
    assert caught.value.field == "dev"


def test_unknown_train_label_is_refused_when_task_json_declares_labels(tmp_path: Path) -> None:
    directory = _task_dir(tmp_path)
    (directory / "task.json").write_text(json.dumps({"labels": ["sports", "science"]}))
    with pytest.raises(DatasetError, match="unknown label 'music' in train line 4"):
        load_task(directory)


def test_fewer_than_two_labels_is_refused(tmp_path: Path) -> None:
    rows = [{"text": "a", "label": "only"}, {"text": "b", "label": "only"}]
    directory = _task_dir(tmp_path, train=rows, dev=rows, test=rows)
    with pytest.raises(DatasetError, match="at least 2 labels"):
        load_task(directory)


def test_non_string_label_is_refused(tmp_path: Path) -> None:
    directory = _task_dir(tmp_path, train=[*TRAIN, {"text": "t", "label": 1.5}])
    with pytest.raises(DatasetError, match="label in train line 5 must be a string or an integer"):
        load_task(directory)


def test_file_over_the_size_cap_is_refused(tmp_path: Path) -> None:
    directory = _task_dir(tmp_path)
    with pytest.raises(DatasetError, match=r"split 'train' file train\.jsonl .* over the"):
        load_task(directory, max_file_bytes=64)


def test_unknown_task_json_key_is_refused(tmp_path: Path) -> None:
    directory = _task_dir(tmp_path)
    (directory / "task.json").write_text(json.dumps({"label": ["a", "b"]}))
    with pytest.raises(DatasetError, match="unknown keys"):
        load_task(directory)


def test_columns_that_fit_no_kind_are_refused(tmp_path: Path) -> None:
    rows = [{"question": "q", "answer": "a"}]
    directory = _task_dir(tmp_path, train=rows, dev=rows, test=rows)
    with pytest.raises(DatasetError, match="cannot infer the task kind from train line 1"):
        load_task(directory)


# --------------------------------------------------------------------------- sampling


def _pool() -> list[Example]:
    counts = {"a": 10, "b": 7, "c": 2}
    return [
        Example(text=f"{label}-{i}", label=label) for label, n in counts.items() for i in range(n)
    ]


def test_few_shot_takes_k_per_label_or_all_of_a_small_label() -> None:
    sample = few_shot_sample(_pool(), k_per_label=4, seed=1)
    assert Counter(example.label for example in sample) == {"a": 4, "b": 4, "c": 2}
    assert len(set(sample)) == len(sample)


def test_few_shot_is_deterministic_and_independent_of_input_order() -> None:
    pool = _pool()
    first = few_shot_sample(pool, k_per_label=3, seed=7)
    assert few_shot_sample(pool, k_per_label=3, seed=7) == first
    assert few_shot_sample(list(reversed(pool)), k_per_label=3, seed=7) == first
    assert few_shot_sample(pool, k_per_label=3, seed=8) != first


def test_few_shot_on_generation_examples_draws_k_in_total() -> None:
    pool = [Example(text=f"p{i}", response=f"r{i}") for i in range(20)]
    assert len(few_shot_sample(pool, k_per_label=5, seed=0)) == 5


def test_few_shot_refuses_k_below_one() -> None:
    with pytest.raises(ConfigError):
        few_shot_sample(_pool(), k_per_label=0, seed=0)


def test_majority_floor_is_the_share_of_the_most_common_label() -> None:
    assert majority_floor(_pool()) == pytest.approx(10 / 19)
    generation = [Example(text="p", response=r) for r in ("x", "x", "y", "z")]
    assert majority_floor(generation) == pytest.approx(0.5)
    with pytest.raises(DatasetError):
        majority_floor([])


# --------------------------------------------------------------------------- bucketing


def test_bucketed_batches_cover_every_index_once() -> None:
    lengths = [(i * 37) % 101 for i in range(1003)]
    batches = length_bucketed_batches(lengths, batch_size=8, seed=3)
    flat = [index for batch in batches for index in batch]
    assert sorted(flat) == list(range(len(lengths)))
    assert all(1 <= len(batch) <= 8 for batch in batches)


def test_bucketed_batches_are_length_homogeneous_and_deterministic() -> None:
    lengths = [(i * 37) % 101 for i in range(1000)]
    batches = length_bucketed_batches(lengths, batch_size=10, seed=3)
    spreads = [max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches]
    # 500 examples per chunk over 101 lengths: a batch of 10 spans a few lengths at most.
    assert max(spreads) <= 5
    assert length_bucketed_batches(lengths, batch_size=10, seed=3) == batches
    assert length_bucketed_batches(lengths, batch_size=10, seed=4) != batches


def test_bucketed_batches_without_shuffle_keep_chunk_order() -> None:
    lengths = [3, 1, 2, 5, 4]
    assert length_bucketed_batches(lengths, batch_size=2, seed=0, shuffle=False) == [
        [1, 2],
        [0, 4],
        [3],
    ]
    with pytest.raises(ConfigError):
        length_bucketed_batches(lengths, batch_size=0, seed=0)


# --------------------------------------------------------------------------- splitting


def test_split_examples_is_stratified_deterministic_and_disjoint() -> None:
    rows = [Example(text=f"{label}{i}", label=label) for label in "xy" for i in range(50)]
    train, dev, test = split_examples(rows, seed=0, dev_fraction=0.2, test_fraction=0.1)
    assert Counter(e.label for e in dev) == {"x": 10, "y": 10}
    assert Counter(e.label for e in test) == {"x": 5, "y": 5}
    assert len(train) == 70
    assert set(train) | set(dev) | set(test) == set(rows)
    assert split_examples(list(reversed(rows)), 0, 0.2, 0.1) == (train, dev, test)
    with pytest.raises(ConfigError):
        split_examples(rows, seed=0, dev_fraction=0.6, test_fraction=0.5)
