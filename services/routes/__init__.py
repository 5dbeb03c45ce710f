"""The REST API's routes, one module per resource; ``services.api.router`` includes them all."""
