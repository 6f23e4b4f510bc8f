"""Commands that talk to a server: `compile --server`, `jobs ...` and `build MANIFEST.toml`
(exit codes in app/cli/common.py).

The client (httpx) and the farm are imported by the commands that use them: every command's
process imports this module, and a local import or compile has no use for them (they are
about 15 MiB of its memory)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli.common import (
    EXIT_CHANGED,
    EXIT_FAILED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CLIError,
    architecture_list,
    load_weights_arg,
)
from app.cli.summary import emit, summary_of_zip
from app.core.formats import FORMATS, PACKAGED
from app.mil import DEFAULT_TARGET, TARGETS

if TYPE_CHECKING:
    from app.client import Client

DEFAULT_SERVER = "http://127.0.0.1:8000"  # what `make run` serves


def _emit(args, data: Any, text: str) -> None:
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else text)


def _client(args) -> Client:
    from app.client import Client

    return Client(args.server, api_key=args.api_key)


def guarded(run):
    """Map client errors to messages and exit codes."""

    def wrapper(args) -> int:
        import httpx

        from app.client import APIError, Unavailable
        from app.client.errors import ServerError

        try:
            return run(args)
        except (Unavailable, ServerError) as exc:
            print(f"error: service unavailable: {exc}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        except APIError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except httpx.TransportError as exc:
            print(
                f"error: cannot reach {args.server}: {exc} (start a service with `make run`, "
                "or name one with --server URL or $ANE_SERVER)",
                file=sys.stderr,
            )
            return EXIT_UNAVAILABLE

    return wrapper


def with_default_server(run):
    """Commands that only talk to a server: --server, else $ANE_SERVER, else a local service."""

    def wrapper(args) -> int:
        args.server = args.server or os.environ.get("ANE_SERVER") or DEFAULT_SERVER
        return run(args)

    return wrapper


def compile_remote(args, params: dict, weights: dict, functions: dict | None = None) -> int:
    """`compile --server URL`: the local flags, executed by the service."""
    from app.client import Client

    with Client(args.server, api_key=args.api_key) as c:
        path = c.compile(
            args.op,
            params,
            weights,
            format=args.format,
            target=args.target,
            name=args.name,
            verify=args.verify,
            save_to=args.output,
            quantize=args.quantize,
            max_quantization_error=args.max_quantization_error,
            functions=functions,
            architectures=args.architectures,
        )
    emit(summary_of_zip(path, server=args.server), args.json)
    return 0


def compile_graph_remote(args, body: dict, weights: dict) -> int:
    """`compile-graph --server URL`: the graph built by the service (inline and digest weights in
    the file pass as they are; --weights files are uploaded first)."""
    from app.client import Client

    graph = {k: v for k, v in body.items() if k not in ("format", "target", "name", "verify")}
    with Client(args.server, api_key=args.api_key) as c:
        try:
            path = c.compile_graph(
                graph,
                weights,
                format=args.format,
                target=args.target,
                name=args.name or body.get("name"),
                verify=args.verify,
                passes=args.passes,
                save_to=args.output,
            )
        except ValueError as exc:  # a weight not named <node>.<weight>
            raise CLIError(str(exc)) from None
    emit(summary_of_zip(path, server=args.server), args.json)
    return 0


def _job_line(job: dict) -> str:
    """`<id>  <state>  <what it builds>  <artifact or error>` (--json gives the whole job)."""
    request = job.get("request") or {}
    what = request.get("op") or request.get("kind") or ""
    if request.get("format"):
        what += f" ({request['format']})"
    if (error := job.get("error")) is not None:
        where = f"{error['field']}: " if error.get("field") else ""
        detail = f"{error.get('kind', 'error')}: {where}{error.get('message', '')}"
    elif (artifact := job.get("artifact")) is not None:
        detail = f"{artifact['filename']} {artifact['size']} bytes {artifact['digest']}"
    else:
        detail = ""
    return f"{job['id']}  {job.get('state', '?'):<10} {what}  {detail}".rstrip()


def _jobs(args) -> int:
    with _client(args) as c:
        if args.jobs_command == "submit":
            weights = load_weights_arg(args.weights)
            job = c.submit(
                args.op,
                json.loads(args.params),
                weights,
                format=args.format,
                target=args.target,
                name=args.name,
                architectures=args.architectures,
            )
            if args.wait:
                job.wait(
                    progress=None
                    if args.json
                    else lambda j: print(f"{j['id']}: {j['state']}", file=sys.stderr)
                )
            _emit(args, job.data, _job_line(job.data))
            return (
                0
                if job.state in ("queued", "generating", "compiling", "succeeded")
                else EXIT_FAILED
            )
        if args.jobs_command == "list":
            jobs = c.jobs(state=args.state, limit=args.limit)["jobs"]
            _emit(args, jobs, "\n".join(_job_line(j) for j in jobs) or "no jobs")
            return 0
        job = c.job(args.id)
        if args.jobs_command == "wait":
            job.wait(timeout=args.timeout)
        elif args.jobs_command == "cancel":
            job.cancel()
        elif args.jobs_command == "download":
            job.download(args.output)
            print(f"wrote {args.output}", file=sys.stderr)
        _emit(args, job.data, _job_line(job.data))
        return EXIT_FAILED if job.state == "failed" else 0


def _build(args) -> int:
    # the farm and the client imported here, as in `guarded` (the module docstring says why)
    from app.client import AsyncClient
    from app.farm.build import build, lock_would_change
    from app.farm.manifest import ManifestError, load_manifest
    from app.farm.progress import Reporter

    try:
        kernels = load_manifest(args.manifest)
    except ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    lock_path = Path(args.lock or Path(args.manifest).with_name("ane-kernels.lock"))
    if args.check:
        changed = lock_would_change(kernels, lock_path)
        _emit(
            args,
            {"changed": changed},
            "lock is up to date" if not changed else "lock would change for: " + ", ".join(changed),
        )
        return EXIT_CHANGED if changed else 0
    reporter = Reporter([k.name for k in kernels], mode="none" if args.json else "auto")

    async def run():
        async with AsyncClient(args.server, api_key=args.api_key) as client:
            return await build(
                kernels,
                client,
                Path(args.out),
                lock_path,
                concurrency=args.concurrency,
                reporter=reporter,
            )

    try:
        outcomes = asyncio.run(run())
    except KeyboardInterrupt:
        print(
            "interrupted: finished kernels are in the lock; run the same command to resume",
            file=sys.stderr,
        )
        return 130
    finally:
        reporter.close()
    failed = [o for o in outcomes if o.status == "failed"]
    summary = {
        o.name: {"status": o.status, "error": o.error, "artifact": o.entry.get("artifact")}
        for o in outcomes
    }
    text = "\n".join(
        f"{o.name}: {o.status}" + (f" ({o.error})" if o.error else "") for o in outcomes
    )
    _emit(args, {"kernels": summary, "lock": str(lock_path)}, text)
    return EXIT_FAILED if failed else 0


def _server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--server", default=None, help=f"service URL (default: $ANE_SERVER or {DEFAULT_SERVER})"
    )
    p.add_argument("--api-key", default=None, help="API key (default: $ANE_API_KEY)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def add_commands(sub) -> None:
    jobs = sub.add_parser("jobs", help="submit and follow build jobs on a server")
    jsub = jobs.add_subparsers(dest="jobs_command", required=True)
    submit = jsub.add_parser("submit", help="queue a kernel build")
    submit.add_argument("op")
    submit.add_argument("--params", default="{}")
    submit.add_argument("--weights", action="append", default=[], metavar="NAME=FILE.npy")
    submit.add_argument("--format", choices=list(FORMATS), default=PACKAGED[0])
    submit.add_argument("--target", choices=list(TARGETS), default=DEFAULT_TARGET)
    submit.add_argument("--name")
    submit.add_argument(
        "--architectures",
        type=architecture_list,
        metavar="CHIPS",
        help="with --format aimodel: compile for these chips, e.g. m4,a18-pro",
    )
    submit.add_argument("--wait", action="store_true", help="wait for the job to end")
    for name, helptext in (
        ("status", "show a job"),
        ("wait", "wait for a job to end"),
        ("cancel", "cancel a queued job"),
    ):
        p = jsub.add_parser(name, help=helptext)
        p.add_argument("id")
        if name == "wait":
            p.add_argument("--timeout", type=float, default=None)
    dl = jsub.add_parser("download", help="download a finished job's zip")
    dl.add_argument("id")
    dl.add_argument("-o", "--output", required=True)
    ls = jsub.add_parser("list", help="recent jobs, newest first")
    ls.add_argument(
        "--state", choices=["queued", "generating", "compiling", "succeeded", "failed", "cancelled"]
    )
    ls.add_argument("--limit", type=int, default=20)
    for p in (submit, *jsub.choices.values()):
        if "--server" not in p._option_string_actions:
            _server_args(p)
    jobs.set_defaults(run=with_default_server(guarded(_jobs)))

    b = sub.add_parser("build", help="build every kernel of a manifest on a server, reproducibly")
    b.add_argument("manifest", help="MANIFEST.toml")
    b.add_argument("--out", default="kernels", help="directory for the zips (default: kernels)")
    b.add_argument("--lock", help="lock file (default: ane-kernels.lock beside the manifest)")
    b.add_argument("--concurrency", type=int, default=4)
    b.add_argument(
        "--check", action="store_true", help="exit 3 if the lock would change; builds nothing"
    )
    _server_args(b)
    b.set_defaults(run=with_default_server(guarded(_build)))
