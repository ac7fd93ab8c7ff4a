"""The method registry: each method module registers a :class:`RecyclingMethod` by name."""

from __future__ import annotations

from dataclasses import dataclass

from recycling_core.errors import ConfigError


@dataclass(frozen=True)
class RecyclingMethod:
    """What a method does with the outdated adapter A0 when moving to the upgraded base M1.

    Attributes:
        name: registry name.
        trains: whether the method tunes on M1 at all (``direct`` does not).
        starts_from_old: the student starts from A0's weights (adapter and saved heads).
        distills: a frozen teacher M0 + A0 adds a distillation term to the loss.
        summary: one line for help texts.
    """

    name: str
    trains: bool
    starts_from_old: bool
    distills: bool
    summary: str


METHODS: dict[str, RecyclingMethod] = {}


def register_method(method: RecyclingMethod) -> RecyclingMethod:
    """Register a method under its name (once)."""
    if method.name in METHODS:
        raise ValueError(f"method {method.name!r} is registered twice")
    METHODS[method.name] = method
    return method


def get_method(name: str) -> RecyclingMethod:
    """Look a method up by name; unknown names raise ConfigError listing the known ones."""
    try:
        return METHODS[name]
    except KeyError:
        raise ConfigError(
            f"unknown method {name!r}; choose one of {', '.join(sorted(METHODS))}", field="method"
        ) from None
