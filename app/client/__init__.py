"""Python client for the ANE Kernel Service (sync and async, httpx)."""

from app.client.client import AsyncClient, AsyncJob, Client, Job
from app.client.errors import (
    APIError,
    InsufficientStorage,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    ServerError,
    Unauthorized,
    Unavailable,
)
from app.client.feeds import InputError, program_inputs

__all__ = [
    "APIError",
    "AsyncClient",
    "AsyncJob",
    "Client",
    "InputError",
    "InsufficientStorage",
    "InvalidRequest",
    "Job",
    "NotFound",
    "PayloadTooLarge",
    "ServerError",
    "Unauthorized",
    "Unavailable",
    "program_inputs",
]
