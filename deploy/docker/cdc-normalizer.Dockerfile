# cdc-normalizer: Debezium topics -> icefjord.changes.* (metrics, /healthz, /readyz on 9401).
# Build from the repository root:
#   docker build -f deploy/docker/cdc-normalizer.Dockerfile -t icefjord/cdc-normalizer:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
# Only what the service imports (lock.py): no Spark, no JVM, no Arrow.
COPY deploy/docker/requirements/cdc-normalizer.txt /tmp/requirements.txt
COPY deploy/docker/install.sh /usr/local/bin/icefjord-install
RUN icefjord-install deps /tmp/requirements.txt compiled
COPY pyproject.toml setup.py README.md /src/
COPY contracts /src/contracts
COPY shared /src/shared
COPY services /src/services
COPY icefjord /src/icefjord
# The compiled record path (native/, Rust), built on the host by build-images.sh; an empty
# folder leaves the image on the Python path.
COPY deploy/docker/native-wheels /tmp/native-wheels
# The per-record modules are compiled with mypyc (setup.py), about twice the changes/s of
# plain CPython; gcc and mypy stay in this stage.
RUN icefjord-install service /tmp/requirements.txt compiled

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="icefjord-cdc-normalizer" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 icefjord \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/icefjord --create-home \
            --shell /usr/sbin/nologin icefjord
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    ICEFJORD_NORMALIZER_METRICS__PORT=9401
WORKDIR /home/icefjord
USER 10001:10001
EXPOSE 9401
# The port the service listens on, also when its settings move it.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=4 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ['ICEFJORD_NORMALIZER_METRICS__PORT'], timeout=4)"]
ENTRYPOINT ["python", "-m", "services.cdc_normalizer"]
