"""Jobs: a request queued, generated, compiled on a worker, watched and fetched. Any request
that is a `JobRequest` (app/jobs/lifecycle.py: a kernel request, a model kit's, a device check's)
runs as a job by its producer (app/jobs/kinds.py).

from app.jobs.select import make_engine
engine = make_engine(Settings(), store=..., blobs=..., compiler=select_compiler(run=pool.run),
                     workdir=..., run_build=pool.run)
await engine.start()
job = await engine.submit(KernelRequest.create("conv", {...}, format="mlmodelc"))
job = await engine.get(job.id); path = await engine.artifact_path(job)
await engine.close()
"""
