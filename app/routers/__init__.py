"""HTTP routers: thin layers that parse, authorise and map results to responses."""
