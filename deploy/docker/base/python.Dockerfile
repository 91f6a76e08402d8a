# Stand-in for python:3.11-slim-bookworm where no registry is reachable: Debian's own Python 3.11.
# `python` and `pip` on PATH as in the official image; no compiler (the build stages add one).
ARG BASE_IMAGE=icefjord-base/debian:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s /usr/bin/python3 /usr/local/bin/python
COPY host-ca.crt /etc/ssl/certs/ca-certificates.crt
ENV LANG=C.UTF-8 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
