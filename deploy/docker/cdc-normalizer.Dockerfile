# syntax=docker/dockerfile:1
# cdc-normalizer: Debezium topics -> icefjord.changes.* (metrics, /healthz, /readyz on 9401).
# Build from the repository root:
#   docker build -f deploy/docker/cdc-normalizer.Dockerfile -t icefjord/cdc-normalizer:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
COPY deploy/docker/requirements.lock /tmp/requirements.lock
# No Spark in this image: it never starts a JVM.
RUN grep -v -E '^(pyspark|py4j)==' /tmp/requirements.lock > /tmp/requirements.txt \
 && /opt/venv/bin/pip install --no-deps -r /tmp/requirements.txt
# The per-record modules are compiled with mypyc (setup.py), about twice the changes/s of
# plain CPython; gcc and mypy stay in this stage.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml setup.py README.md /src/
COPY contracts /src/contracts
COPY shared /src/shared
COPY services /src/services
COPY icefjord /src/icefjord
RUN /opt/venv/bin/pip install mypy==2.4.1 setuptools==84.2.1 \
 && ICEFJORD_MYPYC=1 /opt/venv/bin/pip wheel --no-deps --no-build-isolation -w /tmp/wheels /src \
 && /opt/venv/bin/pip install --no-deps /tmp/wheels/icefjord-*.whl \
 && /opt/venv/bin/pip uninstall -y mypy \
 && /opt/venv/bin/python -m compileall -q /opt/venv/lib

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
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=4 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9401/healthz', timeout=4)"]
ENTRYPOINT ["python", "-m", "services.cdc_normalizer"]
