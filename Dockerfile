FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY hivemem ./hivemem
RUN pip install --no-cache-dir ".[api,mcp]"
# fastembed keeps downloaded models here; mount a volume to keep them across restarts.
ENV FASTEMBED_CACHE_PATH=/models
ENTRYPOINT ["hivemem"]
CMD ["worker", "embed"]
