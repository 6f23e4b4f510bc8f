"""The HTTP service's pipeline below the routers: intake, weights, build pool, problems, auth."""
