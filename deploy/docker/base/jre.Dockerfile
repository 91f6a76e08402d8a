# Stand-in for eclipse-temurin:17-jre: Debian's OpenJDK 17 at the path the service images copy
# (/opt/java/openjdk), with its links into /etc resolved so the folder works on its own.
ARG BASE_IMAGE=icefjord-base/debian:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless ca-certificates-java \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /opt/java \
 && cp -rL /usr/lib/jvm/java-17-openjdk-amd64 /opt/java/openjdk \
 && /opt/java/openjdk/bin/java -version
COPY host-cacerts /tmp/host-cacerts
RUN if [ -s /tmp/host-cacerts ]; then cp /tmp/host-cacerts /opt/java/openjdk/lib/security/cacerts; fi \
 && rm /tmp/host-cacerts
