"""Functional similarity of two adapted models through their attention maps (DESIGN §6).

For each probe input, layer and head, the two models' attention maps are restricted to the
real tokens (attention mask 1) on both the query and the key axis, flattened, and compared by
cosine similarity; the per-input values are averaged with equal weight per input. The chance
level is the same statistic over mismatched head pairs (head i of model A against head j ≠ i
of model B in the same layer).

Attention maps are what Hugging Face models return with ``output_attentions=True``: one tensor
``[batch, heads, seq, seq]`` per layer. Probes can be streamed batch by batch through
:class:`AttentionSimilarityAccumulator`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from recycling_core.reports import SimilarityMetrics

AttentionMaps = Sequence[torch.Tensor]
"""One ``[batch, heads, seq, seq]`` tensor per layer (a stacked 5-D tensor also works)."""

_EPS = 1e-12


class AttentionSimilarityAccumulator:
    """Streams probe batches and accumulates the per-(layer, head) attention similarity.

    Call :meth:`add` once per batch of probe inputs (the two models' maps on the same inputs),
    then :meth:`result`. Every example counts once, whatever batch it came in, so the result
    equals a single call over all probes at once.

    The chance level uses mismatched heads within the same layer. For single-head models,
    where no such pair exists, it uses the head of layer l in A against the head of layer
    l' ≠ l in B instead; a model with one layer and one head has no chance level
    (:meth:`add` raises).
    """

    def __init__(self) -> None:
        """Start empty; the layer and head counts are fixed by the first batch."""
        self._matched_sum: torch.Tensor | None = None
        self._examples = 0
        self._mismatched_sum = 0.0
        self._mismatched_count = 0
        self._layers: int | None = None
        self._heads: int | None = None

    @property
    def n_probes(self) -> int:
        """Number of probe inputs added so far."""
        return self._examples

    def add(
        self,
        maps_a: AttentionMaps,
        maps_b: AttentionMaps,
        attention_mask: torch.Tensor,
    ) -> None:
        """Add one batch of probes.

        Args:
            maps_a: model A's attention maps, one ``[batch, heads, seq, seq]`` tensor per layer.
            maps_b: model B's maps on the same inputs, same shapes.
            attention_mask: ``[batch, seq]``; 1 (or True) marks real tokens, 0 padding. Padding
                may be on either side.

        Raises:
            ValueError: on mismatched layer counts or shapes, a mask of the wrong shape, an
                example without real tokens, or a layer/head count that differs from earlier
                batches.
        """
        layers = len(maps_a)
        if layers == 0 or layers != len(maps_b):
            raise ValueError(
                f"maps_a has {layers} layers and maps_b {len(maps_b)}; need the same, at least 1"
            )
        first = maps_a[0]
        if first is None or first.dim() != 4:
            raise ValueError("each layer's attention map must be a [batch, heads, seq, seq] tensor")
        batch, heads, seq, _ = first.shape
        if self._layers is not None and (layers, heads) != (self._layers, self._heads):
            raise ValueError(
                f"batch has {layers} layers × {heads} heads, earlier batches had "
                f"{self._layers} × {self._heads}"
            )
        if heads < 2 and layers < 2:
            raise ValueError("a chance level needs at least two heads or two layers")
        if tuple(attention_mask.shape) != (batch, seq):
            raise ValueError(
                f"attention_mask has shape {tuple(attention_mask.shape)}, expected {(batch, seq)}"
            )
        real = attention_mask.detach().to(first.device) != 0
        if not bool(real.any(dim=1).all()):
            raise ValueError("every probe input needs at least one real token")
        pair_mask = (real[:, :, None] & real[:, None, :]).reshape(batch, 1, seq * seq)

        matched = torch.zeros(layers, heads, dtype=torch.float64)
        single_head_a: list[torch.Tensor] = []
        single_head_b: list[torch.Tensor] = []
        for layer, (map_a, map_b) in enumerate(zip(maps_a, maps_b, strict=True)):
            if map_a is None or map_b is None:
                raise ValueError(f"layer {layer} has no attention map")
            expected = (batch, heads, seq, seq)
            if tuple(map_a.shape) != expected or tuple(map_b.shape) != expected:
                raise ValueError(
                    f"layer {layer}: maps have shapes {tuple(map_a.shape)} and "
                    f"{tuple(map_b.shape)}, expected {expected}"
                )
            # float64 one layer at a time: identical maps give exactly 1, not 1 ± 1e-7.
            flat_a = map_a.detach().double().reshape(batch, heads, seq * seq) * pair_mask
            flat_b = (
                map_b.detach().to(first.device).double().reshape(batch, heads, seq * seq)
                * pair_mask
            )
            norm_a = flat_a.norm(dim=-1)
            norm_b = flat_b.norm(dim=-1)
            # gram[e, i, j] = <head i of A, head j of B> on example e's real tokens.
            gram = flat_a @ flat_b.transpose(1, 2)
            cosine = gram / (norm_a[:, :, None] * norm_b[:, None, :]).clamp_min(_EPS)
            cosine = cosine.double().cpu()
            diagonal = cosine.diagonal(dim1=1, dim2=2)
            matched[layer] = diagonal.sum(dim=0)
            if heads >= 2:
                self._mismatched_sum += float(cosine.sum() - diagonal.sum())
                self._mismatched_count += batch * heads * (heads - 1)
            else:
                single_head_a.append(flat_a[:, 0])
                single_head_b.append(flat_b[:, 0])

        if heads < 2:
            stacked_a = torch.stack(single_head_a, dim=1)
            stacked_b = torch.stack(single_head_b, dim=1)
            gram = stacked_a @ stacked_b.transpose(1, 2)
            norms = stacked_a.norm(dim=-1)[:, :, None] * stacked_b.norm(dim=-1)[:, None, :]
            cosine = (gram / norms.clamp_min(_EPS)).double().cpu()
            self._mismatched_sum += float(cosine.sum() - cosine.diagonal(dim1=1, dim2=2).sum())
            self._mismatched_count += batch * layers * (layers - 1)

        self._matched_sum = matched if self._matched_sum is None else self._matched_sum + matched
        self._examples += batch
        self._layers, self._heads = layers, heads

    def _require_data(self) -> torch.Tensor:
        if self._matched_sum is None or self._examples == 0:
            raise ValueError("no probe inputs were added")
        return self._matched_sum

    def matrix(self) -> torch.Tensor:
        """Mean cosine similarity per (layer, head) as a float64 ``[layers, heads]`` tensor."""
        return self._require_data() / self._examples

    def chance_level(self) -> float:
        """Mean cosine similarity over mismatched head pairs (the chance level)."""
        self._require_data()
        return self._mismatched_sum / self._mismatched_count

    def result(self) -> SimilarityMetrics:
        """The accumulated :class:`SimilarityMetrics`.

        Raises:
            ValueError: when nothing was added.
        """
        matrix = self.matrix()
        return SimilarityMetrics(
            matrix=matrix.tolist(),
            mean=float(matrix.mean()),
            chance_level=self.chance_level(),
            n_probes=self._examples,
        )


def attention_map_similarity(
    maps_a: AttentionMaps, maps_b: AttentionMaps, attention_mask: torch.Tensor
) -> torch.Tensor:
    """Per-(layer, head) cosine similarity of two models' attention maps, averaged over inputs.

    Args:
        maps_a: model A's maps, one ``[batch, heads, seq, seq]`` tensor per layer.
        maps_b: model B's maps on the same inputs.
        attention_mask: ``[batch, seq]`` with 1 for real tokens.

    Returns:
        A float64 CPU tensor ``[layers, heads]``.
    """
    accumulator = AttentionSimilarityAccumulator()
    accumulator.add(maps_a, maps_b, attention_mask)
    return accumulator.matrix()


def mismatched_head_similarity(
    maps_a: AttentionMaps, maps_b: AttentionMaps, attention_mask: torch.Tensor
) -> float:
    """Chance level: the same statistic over all mismatched head pairs (i ≠ j) per layer.

    Every (example, layer, ordered pair i ≠ j) term has equal weight. Single-head models use
    mismatched layers instead (see :class:`AttentionSimilarityAccumulator`).

    Args:
        maps_a: model A's maps, one ``[batch, heads, seq, seq]`` tensor per layer.
        maps_b: model B's maps on the same inputs.
        attention_mask: ``[batch, seq]`` with 1 for real tokens.
    """
    accumulator = AttentionSimilarityAccumulator()
    accumulator.add(maps_a, maps_b, attention_mask)
    return accumulator.chance_level()


def similarity_metrics(
    maps_a: AttentionMaps, maps_b: AttentionMaps, attention_mask: torch.Tensor
) -> SimilarityMetrics:
    """:class:`SimilarityMetrics` of one batch of probes (matrix, mean, chance level, n).

    For probes spread over several batches use :class:`AttentionSimilarityAccumulator`.
    """
    accumulator = AttentionSimilarityAccumulator()
    accumulator.add(maps_a, maps_b, attention_mask)
    return accumulator.result()
