"""Recycling policies and campaigns: automatic recycling of adapters on model upgrades."""
