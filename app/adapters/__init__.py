"""Adapters: PEFT adapters or full fine-tuning deltas for a task on a model version."""
