"""Content-addressed artifact storage, cache keys and single-flight."""
