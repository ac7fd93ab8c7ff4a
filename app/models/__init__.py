"""Registered models and their versions: lineage, tags, aliases, soft delete."""
