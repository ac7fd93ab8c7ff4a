"""Recycling methods of DESIGN §5, one module each, registered by name."""

from recycling_core.methods import direct, distill, fresh, init, init_distill  # noqa: F401  (registration)
from recycling_core.methods.registry import METHODS, RecyclingMethod, get_method, register_method

__all__ = ["METHODS", "RecyclingMethod", "get_method", "register_method"]
