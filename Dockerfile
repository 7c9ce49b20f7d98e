# The turnledger HTTP service. Configuration comes from TURNLEDGER_* variables
# (see README: Configuration); PostgreSQL needs TURNLEDGER_MASTER_KEY.
FROM python:3.11-slim

WORKDIR /app
COPY pyproject.toml README.md ./
COPY domain ./domain
COPY projections ./projections
COPY infra ./infra
RUN pip install --no-cache-dir . \
    && useradd --system --home-dir /app turnledger \
    && mkdir /data /deletions && chown turnledger /data /deletions
USER turnledger

# /data holds the SQLite files when TURNLEDGER_PERSISTENCE is left at sqlite.
# /deletions holds the deletion record (docs/deletion.md, "Restores"): a volume
# of its own, so that restoring /data or the database never rolls it back.
ENV TURNLEDGER_HTTP_HOST=0.0.0.0 \
    TURNLEDGER_HTTP_PORT=8000 \
    TURNLEDGER_DATA_DIR=/data \
    TURNLEDGER_DELETION_RECORD_DIR=/deletions
VOLUME /data /deletions
EXPOSE 8000
CMD ["turnledger", "serve"]
