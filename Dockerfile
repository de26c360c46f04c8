# preemptscope: the live service (`preemptscope serve`) and the CLI.
#
#   docker build -t preemptscope .
#   docker run -v /var/log/vllm:/logs:ro -v preemptscope-state:/data \
#       -e PREEMPTSCOPE_TOKEN_FILE=/run/secrets/token -p 127.0.0.1:18700:18700 preemptscope
#
# The image follows /logs/vllm.log and listens on 0.0.0.0:18700 (inside a container, loopback
# would be unreachable). Anything on the network that reaches the port can read the API: set a
# token (PREEMPTSCOPE_TOKEN_FILE or PREEMPTSCOPE_TOKEN; serve warns without one) and add the
# names clients use to reach it to PREEMPTSCOPE_ALLOWED_HOSTS (IP addresses always pass).
# Settings are environment variables (docs/exporter.md); set the port with PREEMPTSCOPE_PORT,
# not --port, so the healthcheck probes the same port.
#
# The base is pinned to an exact Python release; pin its digest too where builds must be
# bit-for-bit repeatable: docker buildx imagetools inspect python:3.11.11-slim-bookworm, then
# --build-arg PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:<digest>.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
FROM ${PYTHON_IMAGE}

ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="preemptscope" \
      org.opencontainers.image.description="Tells people running vLLM when their deployment is over capacity, and proves it." \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

# Dependencies first, in their own layer: a code change does not reinstall them. Versions come
# from constraints.txt (scripts/constraints writes it).
COPY pyproject.toml constraints.txt ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt "setuptools>=77" -c constraints.txt \
    && rm /tmp/requirements.txt

# Then the code (no dependency resolution, no build isolation: nothing new is downloaded).
COPY README.md ./
COPY preemptscope ./preemptscope
COPY ingest ./ingest
COPY analysis ./analysis
COPY exporter ./exporter
COPY dashboards ./dashboards
RUN pip install --no-deps --no-build-isolation . \
    && useradd --system --uid 10001 --home-dir /data preemptscope \
    && mkdir -p /data/state /logs && chown preemptscope /data /data/state

USER preemptscope
WORKDIR /data
ENV PREEMPTSCOPE_HOST=0.0.0.0 \
    PREEMPTSCOPE_PORT=18700 \
    PREEMPTSCOPE_STATE_DIR=/data/state \
    PREEMPTSCOPE_LOG=/logs/vllm.log
VOLUME ["/data"]
EXPOSE 18700
# Liveness on the configured port (PREEMPTSCOPE_PORT), over loopback (an IP: the Host check
# passes).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('PREEMPTSCOPE_PORT', '18700'); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status == 200 else 1)"]
ENTRYPOINT ["preemptscope"]
CMD ["serve"]
