"""``init_distill``: start from A0 on M1 and distil from M0 + A0 at the same time."""

from recycling_core.methods.registry import RecyclingMethod, register_method

INIT_DISTILL = register_method(
    RecyclingMethod(
        name="init_distill",
        trains=True,
        starts_from_old=True,
        distills=True,
        summary="initialise from the outdated weights and distil from the outdated model",
    )
)
