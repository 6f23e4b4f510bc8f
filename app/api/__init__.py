"""The HTTP layer below the routers: reading requests off the wire, errors as problem+json,
API keys, access logs, the OpenAPI extras and artifacts as answers."""
