"""Jobs: long work on Celery workers (train, compatibility, recycle, interpolation, similarity)."""
