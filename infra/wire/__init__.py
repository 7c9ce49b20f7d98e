"""The HTTP API's wire contract: request and response models, headers and
error codes. The service and the Python client both import it; it imports
neither (docs/architecture.md)."""
