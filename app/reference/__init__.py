"""Numerical reference: an fp16-storage executor for the IR, and the verification report that
compares a kernel with the float64 definition its catalog op declares."""

from app.reference.executor import Anomaly, Executor, RunResult

__all__ = ["Anomaly", "Executor", "RunResult"]
