"""Metrics of DESIGN §6 as pure functions over predictions, losses, attention maps and tensors.

Nothing here loads a model: callers collect predictions, losses and attention maps and pass
them in; results are the pydantic models of :mod:`recycling_core.reports`.
"""

from recycling_core.metrics.classification import (
    accuracy,
    exact_match,
    macro_f1,
    majority_floor,
    normalize_text,
    task_score,
)
from recycling_core.metrics.compatibility import compatibility_metrics
from recycling_core.metrics.convergence import (
    DEFAULT_TARGET_FRACTION,
    convergence_metrics,
    default_target,
    steps_to_target,
)
from recycling_core.metrics.cost import CostMeter, hardware_info, library_versions
from recycling_core.metrics.interpolation import (
    CONNECTED_THRESHOLD,
    accuracy_barrier,
    alphas,
    interpolation_metrics,
    lerp_into_,
    lerp_state_dicts,
    loss_barrier,
)
from recycling_core.metrics.similarity import (
    AttentionSimilarityAccumulator,
    attention_map_similarity,
    mismatched_head_similarity,
    similarity_metrics,
)
from recycling_core.metrics.weight_distance import (
    module_group,
    module_groups,
    weight_distance,
)

__all__ = [
    "CONNECTED_THRESHOLD",
    "DEFAULT_TARGET_FRACTION",
    "AttentionSimilarityAccumulator",
    "CostMeter",
    "accuracy",
    "accuracy_barrier",
    "alphas",
    "attention_map_similarity",
    "compatibility_metrics",
    "convergence_metrics",
    "default_target",
    "exact_match",
    "hardware_info",
    "interpolation_metrics",
    "lerp_into_",
    "lerp_state_dicts",
    "library_versions",
    "loss_barrier",
    "macro_f1",
    "majority_floor",
    "mismatched_head_similarity",
    "module_group",
    "module_groups",
    "normalize_text",
    "similarity_metrics",
    "steps_to_target",
    "task_score",
    "weight_distance",
]
