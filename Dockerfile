# The API and the Linux worker (generation, packaging, .mlmodelc by the linux compiler backend).
# macOS workers, for Core ML's placement report, run natively on Macs (see docs/farm.md): Core
# ML itself does not run in Linux.

# The project's own wheel, built where a C compiler is: its optional native modules (fp16
# conversion of checkpoints, the palettes' k-means) are compiled here; the slim image below has
# no compiler and would install the package without them (slower, same bytes).
FROM python:3.11 AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
RUN pip wheel --no-deps --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ANE_DATA_DIR=/data

RUN useradd --create-home --uid 10001 ane \
    && mkdir -p /data \
    && chown ane:ane /data

WORKDIR /srv
# Dependencies first, so editing the code does not reinstall them. The coreai extra (Apple's
# coreai-core, for format "aimodel") installs on x86_64; on arm64 Linux it has no wheel and is
# skipped, and that service answers "aimodel" with a 503. The onnx extra (onnx, onnxruntime)
# serves POST /v1/onnx; without it that answers 503 too.
COPY pyproject.toml README.md ./
RUN mkdir app && touch app/__init__.py \
    && pip install ".[coreai,onnx]" \
    && pip uninstall --yes ane-kernel-service \
    && rm -rf app
COPY --from=wheel /wheels /wheels
RUN pip install --no-deps /wheels/*.whl && rm -rf /wheels

USER ane
VOLUME ["/data"]
EXPOSE 8000

# /healthz answers while the process serves requests. The worker service in docker-compose.yml
# replaces this with `ane-kernels worker --check` (its heartbeat in Redis).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"]

CMD ["uvicorn", "app.main:app", "--host", "0.0.0.0", "--port", "8000"]
