"""Alembic migrations of the registry schema (the only way the schema is created)."""
