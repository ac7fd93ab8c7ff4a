"""``fresh``: the baseline — tune a new adapter of the same shape on M1 from scratch."""

from recycling_core.methods.registry import RecyclingMethod, register_method

FRESH = register_method(
    RecyclingMethod(
        name="fresh",
        trains=True,
        starts_from_old=False,
        distills=False,
        summary="tune from scratch on the upgraded model (the baseline)",
    )
)
