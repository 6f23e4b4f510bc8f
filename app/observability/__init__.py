"""Metrics and structured access logs."""
