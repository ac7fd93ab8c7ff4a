"""Tasks: labelled datasets validated by recycling_core and stored as artifacts."""
