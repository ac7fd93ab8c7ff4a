"""``init``: start tuning on M1 from A0's weights (adapter and saved heads)."""

from recycling_core.methods.registry import RecyclingMethod, register_method

INIT = register_method(
    RecyclingMethod(
        name="init",
        trains=True,
        starts_from_old=True,
        distills=False,
        summary="initialise the new tuning from the outdated adapted weights",
    )
)
