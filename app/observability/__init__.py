"""Metrics, structured logs and request ids: how operators watch the service."""
