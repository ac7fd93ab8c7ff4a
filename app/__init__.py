"""Adapter recycling service: registry, scheduling and access control around recycling_core."""
