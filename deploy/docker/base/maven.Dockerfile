# Stand-in for maven:3.9-eclipse-temurin-17: Debian's Maven and OpenJDK 17.
ARG BASE_IMAGE=icefjord-base/debian:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends maven openjdk-17-jdk-headless ca-certificates-java \
 && rm -rf /var/lib/apt/lists/*
COPY host-cacerts /tmp/host-cacerts
RUN if [ -s /tmp/host-cacerts ]; then cp /tmp/host-cacerts /etc/ssl/certs/java/cacerts; fi \
 && rm /tmp/host-cacerts
