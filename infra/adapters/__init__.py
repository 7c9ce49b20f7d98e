"""Adapters for the libraries applications already use (docs/adapters.md).

`openai_agents` (extra `agents`) and `langchain` (extra `langchain`) are thin
modules over the ledger's public API; each imports its library, so import the
one you use.
"""
