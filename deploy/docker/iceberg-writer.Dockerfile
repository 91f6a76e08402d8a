# iceberg-writer: icefjord.changes.* -> Iceberg tables with PySpark (metrics on 9403).
# Carries Java 17, Spark (the pyspark wheel) and the Iceberg jars; the same image runs the
# Spark executors when the writer uses a `k8s://` master (see deploy/README.md).
# Build from the repository root:
#   docker build -f deploy/docker/iceberg-writer.Dockerfile -t icefjord/iceberg-writer:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
ARG JRE_IMAGE=eclipse-temurin:17.0.15_6-jre-jammy
ARG MAVEN_IMAGE=maven:3.9.9-eclipse-temurin-17

# Iceberg runtime, iceberg-aws-bundle and the JDBC drivers, from Maven Central (checksums
# verified by Maven); versions are pinned in deploy/docker/spark-jars/pom.xml.
FROM ${MAVEN_IMAGE} AS jars
COPY deploy/docker/spark-jars/pom.xml /build/pom.xml
RUN mvn -B -q -f /build/pom.xml -Djars.dir=/jars process-resources
# The lease guard (deploy/iceberg-lease-guard): the writer's upsert commits refused, not
# retried by Iceberg, once the maintainer's compaction lease is on the table. Compiled
# against the Iceberg runtime above, with the stage's JDK.
COPY deploy/iceberg-lease-guard/src /build/lease-guard/src
RUN javac --release 11 -cp "$(echo /jars/iceberg-spark-runtime-*.jar)" -d /build/lease-guard/classes \
      $(find /build/lease-guard/src -name '*.java') \
 && jar --create --file /jars/icefjord-lease-guard.jar -C /build/lease-guard/classes .

FROM ${JRE_IMAGE} AS jre

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
# Only what the service imports (lock.py).
COPY deploy/docker/requirements/iceberg-writer.txt /tmp/requirements.txt
COPY deploy/docker/install.sh /usr/local/bin/icefjord-install
RUN icefjord-install deps /tmp/requirements.txt compiled
COPY pyproject.toml setup.py README.md /src/
COPY contracts /src/contracts
COPY shared /src/shared
COPY services /src/services
COPY icefjord /src/icefjord
# The compiled change path (native/, Rust), built on the host by build-images.sh; an empty
# folder leaves the image on the Python path.
COPY deploy/docker/native-wheels /tmp/native-wheels
# The Avro decoder every change record goes through is compiled with mypyc (setup.py), as in
# the cdc-normalizer image; gcc and mypy stay in this stage.
RUN icefjord-install service /tmp/requirements.txt compiled
# The jars go on Spark's own classpath, so driver and executors load them with no shipping.
COPY --from=jars /jars/ /opt/venv/lib/python3.11/site-packages/pyspark/jars/

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="icefjord-iceberg-writer" \
      org.opencontainers.image.licenses="Apache-2.0"
# tini reaps the Spark JVM's children and forwards SIGTERM to the service.
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini=0.19.0-1+b3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 icefjord \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/icefjord --create-home \
            --shell /usr/sbin/nologin icefjord
COPY --from=jre /opt/java/openjdk /opt/java/openjdk
COPY --from=build /opt/venv /opt/venv
COPY deploy/docker/spark-defaults.conf /opt/venv/lib/python3.11/site-packages/pyspark/conf/spark-defaults.conf
COPY deploy/docker/spark-entrypoint.sh /usr/local/bin/icefjord-entrypoint
ENV JAVA_HOME=/opt/java/openjdk \
    SPARK_HOME=/opt/venv/lib/python3.11/site-packages/pyspark \
    PATH=/opt/venv/bin:/opt/java/openjdk/bin:$PATH \
    PYSPARK_PYTHON=/opt/venv/bin/python \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    ICEFJORD_SERVICE_MODULE=services.iceberg_writer \
    ICEFJORD_WRITER_METRICS__PORT=9403 \
    ICEFJORD_WRITER_SPARK__JARS=""
WORKDIR /home/icefjord
USER 10001:10001
EXPOSE 9403
# The port the service listens on, also when its settings move it.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=4 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ['ICEFJORD_WRITER_METRICS__PORT'], timeout=4)"]
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/icefjord-entrypoint"]
