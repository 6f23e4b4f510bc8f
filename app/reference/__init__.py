"""Numerical reference: an fp16-storage executor for the IR, float64 definitions of each catalog
op, and the verification report that compares the two."""

from app.reference.executor import Anomaly, ExecutionError, Executor, RunResult

__all__ = ["Anomaly", "ExecutionError", "Executor", "RunResult"]
