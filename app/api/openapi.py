"""What the OpenAPI document says beyond what FastAPI derives from the handlers: request bodies
the handlers parse themselves (kernel requests, jobs, uploads), runnable examples, parameters
declared by hand, and the error answers (every error is problem+json)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import Field

from app.api.auth import add_security
from app.api.examples import EXAMPLE_FILES, EXAMPLE_HIDDEN
from app.api.problems import MEDIA_TYPE as PROBLEM_MEDIA_TYPE
from app.graphs.examples import swiglu_ffn
from app.jobs.lifecycle import Job
from app.kernels import CATALOG
from app.schemas.wire import KERNEL_REQUEST_ADAPTER, GraphRequest, ProblemDocument

ZIP = "application/zip"
MAX_BATCH = 256  # kernels in one POST /v1/jobs

_DESCRIPTIONS = {
    400: "Malformed body (JSON syntax, multipart framing)",
    401: "Missing or invalid API key (only when ANE_API_KEYS is set)",
    404: "Unknown op, blob or route",
    409: "Not possible in the resource's state (an upload part at the wrong offset, a job not "
    "finished); the problem says what is",
    413: "Body or weight over the configured limit; the problem states the limit",
    415: "Unsupported Content-Type",
    422: "Validation failed; `field` names the input at fault",
    503: "Compiler unavailable, the build backlog full or the job broker unreachable (see "
    "Retry-After), or a data directory not writable (the problem names it)",
    504: "Timed out: an upload part whose sender fell silent for ANE_UPLOAD_PART_TIMEOUT_S is "
    "dropped (resume from `received`)",
    507: "The data volume is full: the problem names the store, its directory and the bytes "
    "it needed",
}


class JobView(Job):
    """A job as the API shows it (`Job.public`): the request in its JSON form, inline weight
    values left out."""

    # the request in its JSON form, where Job holds the request itself
    request: dict[str, Any] = Field(  # type: ignore[assignment]
        description="what was asked: a kernel or graph request, a model kit's files and options, "
        "or a device check's kit and device"
    )


def job_answer(description: str) -> dict[str, Any]:
    return {"description": description, "model": JobView}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {
        status: {
            "description": _DESCRIPTIONS[status],
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


# -- POST /v1/kernels ---------------------------------------------------------------------------

CONV_EXAMPLE = {
    "op": "conv",
    "in_channels": 2,
    "out_channels": 2,
    "spatial": 4,
    "weights": {"weight": [[1.0, 0.0], [0.0, 1.0]]},
}
KERNEL_EXAMPLES = {
    "conv_inline": {
        "summary": "conv with inline weights",
        "value": CONV_EXAMPLE,
    },
    "conv_mil_ios17": {
        "summary": "conv with bias as a MIL bundle for iOS 17",
        "value": {
            **CONV_EXAMPLE,
            "bias": True,
            "format": "mil",
            "target": "ios17",
            "name": "proj",
            "weights": {"weight": [[0.5, 0.0], [0.0, 0.5]], "bias": [0.1, -0.1]},
        },
    },
    "sdpa": {
        "summary": "causal attention (no weights)",
        "value": {"op": "sdpa", "n_heads": 2, "head_dim": 8, "seq_len": 4, "causal": True},
    },
    "conv_palettized": {
        "summary": "conv with a 2-bit palettized weight, its quantization error reported",
        "value": {
            "op": "conv",
            "in_channels": 8,
            "out_channels": 4,
            "spatial": 4,
            "weights": {"weight": [[0.25, -0.125, 0.5, -0.25, 0.125, 0.375, -0.5, 0.0625]] * 4},
            "quantize": {"mode": "palettize", "nbits": 2},
            "verify": True,
            "max_quantization_error": 0.5,
        },
    },
    "rmsnorm_blob": {
        "summary": "rmsnorm with its weight a tensor of an uploaded checkpoint (the example "
        "checkpoint's model.safetensors: see POST /v1/blobs/uploads)",
        "value": {
            "op": "rmsnorm",
            "channels": EXAMPLE_HIDDEN,
            "spatial": 8,
            "weights": {"weight": f"{EXAMPLE_FILES['model.safetensors']}#model.norm.weight"},
        },
    },
}
KERNEL_MULTIPART = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "spec": {
            "type": "string",
            "description": "the JSON kernel request (as for application/json)",
            "example": '{"op": "conv", "in_channels": 2, "out_channels": 2, "spatial": 4}',
        },
    },
    "additionalProperties": {
        "type": "string",
        "format": "binary",
        "description": "one part per weight, named after it: .npy, safetensors, or raw "
        "little-endian bytes (dtype and shape from spec.weights.<name> or the op's defaults)",
    },
}
KERNEL_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"$ref": "#/components/schemas/KernelRequest"},
                "examples": KERNEL_EXAMPLES,
            },
            "multipart/form-data": {"schema": KERNEL_MULTIPART},
        },
    }
}
NOT_MODIFIED = {"description": "Not modified: If-None-Match matched the artifact digest"}
KERNEL_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The zipped artifact. `X-Cache` says whether this request built it.",
        "content": {ZIP: {"schema": {"type": "string", "format": "binary"}}},
        "headers": {
            "ETag": {"description": "the artifact digest", "schema": {"type": "string"}},
            "X-Cache": {"schema": {"type": "string", "enum": ["hit", "miss"]}},
        },
    },
    202: {"description": "A compile still running (format mlmodelc): the job, at `Location`"},
    304: NOT_MODIFIED,
    **problems(400, 401, 404, 413, 415, 422, 503, 507),
}
# Read by hand in the handlers (FastAPI's parameter resolution cost more than serving a cached
# artifact) and declared here for the document.
BYPASS_PARAMETER = {
    "name": "bypass_cache",
    "in": "query",
    "required": False,
    "description": "build again even if cached (same as `bypass_cache` in the body)",
    "schema": {"type": "boolean", "default": False, "title": "Bypass Cache"},
}
DEVICE_PARAMETER = {
    "name": "device",
    "in": "query",
    "required": False,
    "description": "a device to estimate the build on in X-ANE-Estimate (repeat for several; "
    "none: a default set; GET /v1/devices lists them)",
    "schema": {"type": "array", "items": {"type": "string"}, "title": "Device"},
    "style": "form",
    "explode": True,
}
OP_PARAMETER = {
    "name": "op",
    "in": "path",
    "required": True,
    "description": "a catalog op (GET /v1/ops)",
    "schema": {"type": "string", "enum": list(CATALOG), "examples": ["conv"], "title": "Op"},
}

# -- POST /v1/graphs ----------------------------------------------------------------------------


def _matrix(rows: int, cols: int, seed: int) -> list[list[float]]:
    """Small fixed weights for the runnable example (a rotation of a few exact values)."""
    values = [0.25, -0.125, 0.5, -0.25, 0.125, 0.375, -0.5, 0.0625]
    return [[values[(seed + 3 * r + c) % len(values)] for c in range(cols)] for r in range(rows)]


SWIGLU_FFN = {
    "name": "ffn",
    **swiglu_ffn(
        4, 8, 8, {"gate": _matrix(8, 4, 0), "up": _matrix(8, 4, 1), "down": _matrix(4, 8, 2)}
    ),
    "format": "mil",
    "verify": True,
}
GRAPH_EXAMPLES = {
    "swiglu_ffn": {
        "summary": "a SwiGLU FFN (down(silu(gate(x)) * up(x))), verified",
        "value": SWIGLU_FFN,
    },
    "rmsnorm_residual": {
        "summary": "RMSNorm then a residual add, two outputs",
        "value": {
            "inputs": {"x": {"shape": [1, 4, 1, 2]}, "r": {"shape": [1, 4, 1, 2]}},
            "nodes": [
                {
                    "id": "norm",
                    "op": "rmsnorm",
                    "inputs": {"x": "x"},
                    "weights": {"weight": [1.0, 0.5, 2.0, 1.0]},
                },
                {"id": "sum", "op": "add", "inputs": {"x": "norm", "y": "r"}},
            ],
            "outputs": {"normed": "norm", "y": "sum"},
        },
    },
}
GRAPH_MULTIPART = {
    "type": "object",
    "required": ["spec"],
    "properties": {"spec": {"type": "string", "description": "the JSON graph request"}},
    "additionalProperties": {
        "type": "string",
        "format": "binary",
        "description": "one part per weight, named <node>.<weight>: .npy, safetensors, or raw "
        "bytes described by nodes[i].weights.<weight> = {dtype, shape}",
    },
}
GRAPH_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"$ref": "#/components/schemas/GraphRequest"},
                "examples": GRAPH_EXAMPLES,
            },
            "multipart/form-data": {"schema": GRAPH_MULTIPART},
        },
    }
}

# -- POST /v1/jobs ------------------------------------------------------------------------------

JOB_EXAMPLE = {**CONV_EXAMPLE, "format": "mlmodelc"}
JOBS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "oneOf": [
                        {"$ref": "#/components/schemas/KernelRequest"},
                        {"$ref": "#/components/schemas/GraphRequest"},
                        {
                            "type": "object",
                            "required": ["kernels"],
                            "properties": {
                                "kernels": {
                                    "type": "array",
                                    "maxItems": MAX_BATCH,
                                    "items": {
                                        "oneOf": [
                                            {"$ref": "#/components/schemas/KernelRequest"},
                                            {"$ref": "#/components/schemas/GraphRequest"},
                                        ]
                                    },
                                }
                            },
                        },
                    ]
                },
                "examples": {
                    "one": {"summary": "one kernel, compiled", "value": JOB_EXAMPLE},
                    "graph": {"summary": "a graph, as a job", "value": SWIGLU_FFN},
                    "batch": {
                        "summary": "a batch: one job per kernel",
                        "value": {"kernels": [JOB_EXAMPLE, {**JOB_EXAMPLE, "name": "second"}]},
                    },
                },
            },
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["spec"],
                    "properties": {"spec": {"type": "string"}},
                    "additionalProperties": {"type": "string", "format": "binary"},
                }
            },
        },
    }
}

# -- POST /v1/blobs -----------------------------------------------------------------------------

UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {"file": {"type": "string", "format": "binary"}},
                }
            },
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        },
    }
}


def install(app: FastAPI, *, with_api_keys: bool) -> None:
    """Register the schemas the hand-parsed bodies refer to (the kernel request union, the
    problem document): FastAPI only collects models it parses itself. The bearer scheme is
    declared only when keys are configured, so the docs describe the service as it runs."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = generate()
        ref = "#/components/schemas/{model}"
        union = KERNEL_REQUEST_ADAPTER.json_schema(ref_template=ref)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(union.pop("$defs", {}))
        components["KernelRequest"] = union
        graph = GraphRequest.model_json_schema(ref_template=ref)
        components.update(graph.pop("$defs", {}))
        components["GraphRequest"] = graph
        problem = ProblemDocument.model_json_schema(ref_template=ref)
        components.update(problem.pop("$defs", {}))
        components["Problem"] = problem
        if with_api_keys:
            add_security(schema)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to amend it
