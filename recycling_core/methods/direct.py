"""``direct``: put A0 on M1 unchanged; for full fine-tunes θ = M1 + (θ_tuned − M0)."""

from recycling_core.methods.registry import RecyclingMethod, register_method

DIRECT = register_method(
    RecyclingMethod(
        name="direct",
        trains=False,
        starts_from_old=True,
        distills=False,
        summary="apply the outdated adapter to the upgraded model as it is (evaluation only)",
    )
)
