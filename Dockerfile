# preemptscope: the live service (`preemptscope serve`) and the CLI.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY preemptscope ./preemptscope
COPY ingest ./ingest
COPY analysis ./analysis
COPY exporter ./exporter
COPY dashboards ./dashboards
RUN pip install . \
    && useradd --system --uid 10001 --home-dir /data preemptscope \
    && mkdir -p /data && chown preemptscope /data
USER preemptscope
WORKDIR /data
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status == 200 else 1)"
ENTRYPOINT ["preemptscope"]
CMD ["serve", "--help"]
