"""The HTTP service: FastAPI routes over the ledger, the change feed and devices."""
