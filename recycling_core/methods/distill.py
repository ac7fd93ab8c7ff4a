"""``distill``: a fresh adapter on M1 trained with (1−a)·CE + a·T²·KL(teacher_T ‖ student_T).

The teacher is the outdated adapted model M0 + A0, frozen; an optional hidden-state MSE term is
weighted by ``TrainingConfig.hidden_mse_weight``.
"""

from recycling_core.methods.registry import RecyclingMethod, register_method

DISTILL = register_method(
    RecyclingMethod(
        name="distill",
        trains=True,
        starts_from_old=False,
        distills=True,
        summary="distil the outdated adapted model into a fresh adapter on the upgraded model",
    )
)
