"""Tiny models, tokenizers, tasks and corpora built locally, for tests and demos.

Nothing here downloads anything: the tokenizer is a word-level ``tokenizers`` model over a
fixed built-in vocabulary, the models are randomly initialised from a seed and saved as
safetensors, and the synthetic task and corpora are generated from the same vocabulary.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, TypeAlias

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import (
    BertConfig,
    BertForPreTraining,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

from recycling_core.data import Example, TaskKind, write_task
from recycling_core.errors import ConfigError
from recycling_core.files import atomic_write_text, refuse_pickle_files

ModelKind: TypeAlias = Literal["encoder", "causal"]
CorpusDomain: TypeAlias = Literal["a", "b"]

ENCODER_SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
CAUSAL_SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<unk>", "<s>", "</s>")

# fmt: off
TOPIC_KEYWORDS: dict[str, tuple[str, ...]] = {
    "sports": (
        "football", "soccer", "tennis", "goal", "team", "coach", "match", "player",
        "stadium", "score", "league", "referee", "ball", "race", "champion",
    ),
    "science": (
        "atom", "physics", "chemistry", "biology", "experiment", "theory", "molecule",
        "energy", "laboratory", "research", "cell", "gene", "planet", "telescope", "equation",
    ),
    "music": (
        "guitar", "piano", "song", "melody", "rhythm", "concert", "band", "singer", "drum",
        "album", "chorus", "violin", "jazz", "opera", "orchestra",
    ),
    "food": (
        "bread", "cheese", "pasta", "soup", "recipe", "kitchen", "chef", "spice", "fruit",
        "salad", "dinner", "butter", "sugar", "rice", "bakery",
    ),
    "travel": (
        "airport", "hotel", "beach", "passport", "journey", "island", "ticket", "luggage",
        "tourist", "mountain", "museum", "flight", "train", "map", "village",
    ),
}
"""Keyword sets of the synthetic topic task; the label of a sentence is its dominant topic."""

TOPICS: tuple[str, ...] = tuple(TOPIC_KEYWORDS)
"""Topic label words, in label order (``num_labels`` takes the first N)."""

LABEL_WORDS: tuple[str, ...] = (
    *TOPICS, "positive", "negative", "neutral", "yes", "no", "true", "false",
    "topic", "label", "answer", "question", "sentence",
)

FILLER_WORDS: tuple[str, ...] = (
    "the", "a", "an", "of", "to", "in", "on", "at", "for", "with", "and", "but", "or", "is",
    "was", "are", "were", "be", "been", "has", "have", "had", "it", "this", "that", "these",
    "those", "i", "you", "he", "she", "we", "they", "my", "your", "his", "her", "our",
    "their", "me", "him", "us", "them", "what", "which", "who", "when", "where", "why", "how",
    "all", "some", "many", "much", "more", "most", "very", "really", "just", "also", "not",
    "only", "then", "than", "so", "as", "if", "about", "after", "before", "from", "into",
    "over", "under", "again", "today", "yesterday", "tomorrow", "morning", "evening", "night",
    "day", "week", "year", "time", "people", "man", "woman", "child", "friend", "family",
    "city", "house", "school", "work", "life", "world", "way", "thing", "place", "good",
    "great", "new", "old", "big", "small", "long", "short", "little", "young", "first",
    "last", "next", "early", "late", "happy", "sad", "nice", "bad", "best", "better",
    "quite", "every", "other", "same", "different", "say", "said", "see", "saw", "go",
    "went", "come", "came", "make", "made", "take", "took", "know", "think", "want", "like",
    "look", "find", "give", "tell", "feel", "try", "leave", "call", "talk", "read", "write",
    "walk", "watch", "hear", "love", "enjoy", "remember", "hope", "start", "finish", "open",
    "close", "there", "here", "now", "still", "never", "always", "often", "sometimes",
    "together", "alone", "because", "while", "during", "around", "between", "through",
    "without", "maybe", "perhaps", "probably", "certainly", "one", "two", "three",
    "four", "five", "ten", "hundred", "red", "blue", "green", "bright", "dark", "warm",
    "cold", "quiet", "loud", "easy", "hard", "strange", "simple", "busy", "free",
)
"""Topic-neutral English words used as noise in synthetic sentences and corpora."""

PUNCTUATION: tuple[str, ...] = (".", ",", "?", "!", ":", ";", "'", "-", "(", ")")
# fmt: on


def _unique(words: Sequence[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for word in words:
        seen.setdefault(word.lower(), None)
    return tuple(seen)


BUILTIN_VOCABULARY: tuple[str, ...] = _unique(
    (*FILLER_WORDS, *LABEL_WORDS, *(w for ws in TOPIC_KEYWORDS.values() for w in ws), *PUNCTUATION)
)
"""The fixed word list (about 300 entries) of every tiny tokenizer, special tokens excluded."""


def build_word_tokenizer(
    vocabulary: Sequence[str], kind: ModelKind, model_max_length: int = 128
) -> PreTrainedTokenizerFast:
    """Build a word-level fast tokenizer that needs no download.

    The text is lowercased, split on whitespace and punctuation (``Whitespace``
    pre-tokenizer), and every word maps to its id; unknown words map to the UNK token.

    - ``encoder``: special tokens ``[PAD] [UNK] [CLS] [SEP] [MASK]`` (ids 0-4), sequences
      become ``[CLS] a [SEP]`` (pairs ``[CLS] a [SEP] b [SEP]`` with token type ids).
    - ``causal``: special tokens ``<pad> <unk> <s> </s>`` (ids 0-3), ``<s>`` is prepended,
      no end token is added; no token type ids.

    Decoding joins words with spaces and re-attaches ``. , ? !`` and apostrophes to the word
    before them (other punctuation such as ``:`` stays space-separated).

    Args:
        vocabulary: the words (lowercased and deduplicated; order kept after the specials).
        kind: ``"encoder"`` or ``"causal"``.
        model_max_length: the tokenizer's maximum sequence length.

    Returns:
        A tokenizer that ``save_pretrained`` writes and ``AutoTokenizer.from_pretrained``
        loads back offline.

    Raises:
        ConfigError: for an unknown kind or an empty vocabulary.
    """
    if kind not in ("encoder", "causal"):
        raise ConfigError(f"unknown model kind {kind!r}; expected encoder or causal", field="kind")
    specials = ENCODER_SPECIAL_TOKENS if kind == "encoder" else CAUSAL_SPECIAL_TOKENS
    words = [word for word in _unique(vocabulary) if word and word not in specials]
    if not words:
        raise ConfigError("the vocabulary is empty", field="vocabulary")
    vocab = {token: index for index, token in enumerate((*specials, *words))}
    unk_token = specials[1]

    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk_token))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    if kind == "encoder":
        backend.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
        )
        return PreTrainedTokenizerFast(
            tokenizer_object=backend,
            pad_token="[PAD]",
            unk_token="[UNK]",
            cls_token="[CLS]",
            sep_token="[SEP]",
            mask_token="[MASK]",
            model_max_length=model_max_length,
            model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        )
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A",
        pair="<s> $A <s>:1 $B:1",
        special_tokens=[("<s>", vocab["<s>"])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        model_max_length=model_max_length,
        model_input_names=["input_ids", "attention_mask"],
    )


def _encoder_model(
    tokenizer: PreTrainedTokenizerFast,
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    intermediate_size: int,
    max_position_embeddings: int,
) -> PreTrainedModel:
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        type_vocab_size=2,
        pad_token_id=tokenizer.pad_token_id,
        architectures=["BertForMaskedLM"],
    )
    # BertForPreTraining holds the encoder, the pooler and the MLM head, like the published
    # bert-base checkpoints: the pooler is saved instead of being re-drawn at every load.
    return BertForPreTraining(config)


def _causal_model(
    tokenizer: PreTrainedTokenizerFast,
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    intermediate_size: int,
    max_position_embeddings: int,
    num_key_value_heads: int | None,
) -> PreTrainedModel:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_key_value_heads or num_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        architectures=["LlamaForCausalLM"],
    )
    return LlamaForCausalLM(config)


def make_tiny_model(
    out_dir: str | Path,
    kind: ModelKind = "encoder",
    seed: int = 0,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 4,
    intermediate_size: int = 64,
    max_position_embeddings: int = 128,
    num_key_value_heads: int | None = None,
    vocabulary: Sequence[str] = BUILTIN_VOCABULARY,
) -> Path:
    """Create a tiny randomly initialised model directory with its tokenizer.

    - ``encoder``: a BERT (``BertConfig``, ``architectures = ["BertForMaskedLM"]``) whose
      weights include the encoder, the pooler and the masked-LM head. It loads with
      ``AutoModelForSequenceClassification.from_pretrained(dir, num_labels=N)`` (new random
      classifier) and ``AutoModelForMaskedLM``.
    - ``causal``: a Llama (``LlamaConfig``, untied embeddings) saved from
      ``LlamaForCausalLM``; loads with ``AutoModelForCausalLM.from_pretrained(dir)``.

    Weights are drawn from ``seed`` (the global torch RNG is left untouched) and saved as
    ``model.safetensors``; the same arguments give byte-identical weights. The word-level
    tokenizer of :func:`build_word_tokenizer` is saved beside them.

    Args:
        out_dir: destination directory (created if missing; existing files are replaced).
        kind: ``"encoder"`` or ``"causal"``.
        seed: seed of the random weights.
        hidden_size, num_layers, num_heads, intermediate_size, max_position_embeddings:
            model dimensions; ``hidden_size`` must be divisible by ``num_heads``.
        num_key_value_heads: key/value heads of the causal model (default ``num_heads``).
        vocabulary: tokenizer words (default :data:`BUILTIN_VOCABULARY`).

    Returns:
        The model directory.

    Raises:
        ConfigError: for an unknown kind or inconsistent dimensions.
    """
    if kind not in ("encoder", "causal"):
        raise ConfigError(f"unknown model kind {kind!r}; expected encoder or causal", field="kind")
    if hidden_size % num_heads != 0:
        raise ConfigError(
            f"hidden_size {hidden_size} is not divisible by num_heads {num_heads}",
            field="hidden_size",
        )
    destination = Path(out_dir)
    destination.mkdir(parents=True, exist_ok=True)
    tokenizer = build_word_tokenizer(vocabulary, kind, model_max_length=max_position_embeddings)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if kind == "encoder":
            model = _encoder_model(
                tokenizer,
                hidden_size,
                num_layers,
                num_heads,
                intermediate_size,
                max_position_embeddings,
            )
        else:
            model = _causal_model(
                tokenizer,
                hidden_size,
                num_layers,
                num_heads,
                intermediate_size,
                max_position_embeddings,
                num_key_value_heads,
            )
    model.save_pretrained(destination, safe_serialization=True)
    if kind == "encoder":
        # save_pretrained records the saving class (BertForPreTraining); like the published
        # BERT checkpoints, the directory declares itself a masked LM.
        model.config.architectures = ["BertForMaskedLM"]
        model.config.save_pretrained(destination)
    tokenizer.save_pretrained(destination)
    refuse_pickle_files(destination)
    return destination


def _topic_sentence(
    rng: random.Random, topic: str, topics: Sequence[str], min_words: int, max_words: int
) -> list[str]:
    """Words of one sentence whose dominant topic is ``topic``."""
    length = rng.randint(min_words, max_words)
    topic_count = rng.randint(2, 4)
    others = [other for other in topics if other != topic]
    distractor_count = rng.randint(0, topic_count - 1) if others else 0
    distractor_count = min(distractor_count, max(0, length - topic_count))
    words = [rng.choice(TOPIC_KEYWORDS[topic]) for _ in range(topic_count)]
    if distractor_count:
        distractor_topic = rng.choice(others)
        words += [rng.choice(TOPIC_KEYWORDS[distractor_topic]) for _ in range(distractor_count)]
    words += [rng.choice(FILLER_WORDS) for _ in range(length - len(words))]
    rng.shuffle(words)
    return words


def make_synthetic_task(
    out_dir: str | Path,
    n_train: int = 600,
    n_dev: int = 150,
    n_test: int = 150,
    seed: int = 0,
    kind: TaskKind = "classification",
    num_labels: int = 3,
    fmt: Literal["jsonl", "csv"] = "jsonl",
) -> Path:
    """Write a small learnable topic task with :func:`recycling_core.data.write_task`.

    Each sentence has 6-14 words from the built-in vocabulary: 2-4 keywords of its topic,
    fewer keywords of one other topic, and filler words. The label is the dominant topic, one
    of the first ``num_labels`` of :data:`TOPICS`, drawn uniformly (so the majority floor is
    about ``1 / num_labels``); a tiny model learns it well above the floor in a few hundred
    steps.

    - ``classification``: rows ``text`` = the sentence, ``label`` = the topic word, and a
      ``task.json`` declaring the label set.
    - ``generation``: rows ``prompt`` = ``"topic of: <sentence>"``, ``response`` = the topic
      word.

    Args:
        out_dir: the task directory to write.
        n_train, n_dev, n_test: examples per split (each at least 1).
        seed: random seed; the same arguments give identical files.
        kind: ``"classification"`` or ``"generation"``.
        num_labels: number of topics, 2 to ``len(TOPICS)``.
        fmt: ``"jsonl"`` or ``"csv"``.

    Returns:
        The task directory.

    Raises:
        ConfigError: for a label count or split size out of range.
    """
    if not 2 <= num_labels <= len(TOPICS):
        raise ConfigError(
            f"num_labels must be between 2 and {len(TOPICS)}, got {num_labels}",
            field="num_labels",
        )
    for split_name, size in (("n_train", n_train), ("n_dev", n_dev), ("n_test", n_test)):
        if size < 1:
            raise ConfigError(f"{split_name} must be at least 1, got {size}", field=split_name)
    topics = TOPICS[:num_labels]
    rng = random.Random(seed)

    def draw(count: int) -> list[Example]:
        examples: list[Example] = []
        for _ in range(count):
            topic = rng.choice(topics)
            sentence = " ".join(_topic_sentence(rng, topic, topics, 6, 14))
            if kind == "classification":
                examples.append(Example(text=sentence, label=topic))
            else:
                examples.append(Example(text=f"topic of: {sentence}", response=topic))
        return examples

    train, dev, test = draw(n_train), draw(n_dev), draw(n_test)
    task_name = f"synthetic-topics-{num_labels}" if kind == "classification" else "synthetic-gen"
    return write_task(
        out_dir,
        name=task_name,
        kind=kind,
        train=train,
        dev=dev,
        test=test,
        labels=list(topics) if kind == "classification" else None,
        fmt=fmt,
    )


CORPUS_TOPIC_WEIGHTS: dict[str, tuple[float, ...]] = {
    "a": (0.35, 0.35, 0.10, 0.10, 0.10),
    "b": (0.05, 0.05, 0.30, 0.30, 0.30),
}
"""Topic mix (in :data:`TOPICS` order) of each corpus domain."""


def make_corpus(out_file: str | Path, n_lines: int, seed: int, domain: CorpusDomain = "a") -> Path:
    """Write an unlabeled text corpus, one sentence per line, for the upgrade simulator.

    Both domains use the built-in vocabulary with different word frequencies: domain ``a``
    favours sports and science keywords and draws filler words with Zipf weights in one
    rank order; domain ``b`` favours music, food and travel and reverses the filler ranking.
    Continued training on ``b`` thus shifts a model trained on ``a``.

    Args:
        out_file: the text file to write (parent directories are created).
        n_lines: number of sentences, at least 1.
        seed: random seed; the same arguments give an identical file.
        domain: ``"a"`` or ``"b"``.

    Returns:
        The corpus file.

    Raises:
        ConfigError: for an unknown domain or a non-positive line count.
    """
    if domain not in CORPUS_TOPIC_WEIGHTS:
        raise ConfigError(f"unknown corpus domain {domain!r}; expected 'a' or 'b'", field="domain")
    if n_lines < 1:
        raise ConfigError(f"n_lines must be at least 1, got {n_lines}", field="n_lines")
    rng = random.Random(seed)
    filler = list(FILLER_WORDS) if domain == "a" else list(reversed(FILLER_WORDS))
    filler_weights = [1.0 / (rank + 1) for rank in range(len(filler))]
    topic_weights = CORPUS_TOPIC_WEIGHTS[domain]
    lines: list[str] = []
    for _ in range(n_lines):
        length = rng.randint(6, 14)
        topic = rng.choices(TOPICS, weights=topic_weights)[0]
        keyword_count = rng.randint(1, 3)
        words = [rng.choice(TOPIC_KEYWORDS[topic]) for _ in range(keyword_count)]
        words += rng.choices(filler, weights=filler_weights, k=length - keyword_count)
        rng.shuffle(words)
        lines.append(" ".join(words) + " .")
    return atomic_write_text(out_file, "\n".join(lines) + "\n")
