"""Operators' view of the service: counts, queues, workers, failures (``/v1/admin``)."""
