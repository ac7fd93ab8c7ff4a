"""Liveness (``/healthz``) and readiness (``/readyz``) probes."""
