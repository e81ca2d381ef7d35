# Pinned: the interpreter, and every package at the version CI last passed with.
FROM python:3.11.11-slim-bookworm
WORKDIR /app
COPY pyproject.toml README.md ./
COPY .ci/constraints.txt ./.ci/constraints.txt
COPY hivemem ./hivemem
RUN pip install --no-cache-dir -c .ci/constraints.txt ".[api,mcp]"
# fastembed keeps downloaded models here; mount a volume to keep them across restarts.
ENV FASTEMBED_CACHE_PATH=/models
ENTRYPOINT ["hivemem"]
CMD ["worker", "embed"]
