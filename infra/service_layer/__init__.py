"""The service layer: the `Conversations` application and what runs beside it.

Commands load a `Conversation` (turnledger.domain), call it and save it; the
read side (turnledger.projections) is written in the same transaction. The log
readers (purge, audit, feed) and the batching of writes live here too, because
they read the store and run threads: the model they serve stays free of I/O.
"""
