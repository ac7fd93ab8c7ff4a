"""Celery workers: take job ids, load state from the registry, call recycling_core, write back."""
