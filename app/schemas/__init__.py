"""The HTTP API's wire models: request bodies (derived from the op catalog) and answers."""
