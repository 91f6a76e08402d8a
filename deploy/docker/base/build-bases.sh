#!/usr/bin/env bash
# Build local stand-ins for the public base images the service Dockerfiles name, for machines
# that reach Debian's packages but no image registry:
#   icefjord-base/debian:bookworm   a debootstrapped Debian 12 root, imported
#   icefjord-base/python:3.11       for PYTHON_IMAGE  (python:3.11-slim-bookworm)
#   icefjord-base/jre:17            for JRE_IMAGE     (eclipse-temurin:17-jre)
#   icefjord-base/maven:3           for MAVEN_IMAGE   (maven:3-eclipse-temurin-17)
# They trust this machine's CA bundle (/etc/ssl/certs/ca-certificates.crt and Java's cacerts),
# so pip, apt and Maven inside a build work where the host's do.
#
#   deploy/docker/base/build-bases.sh [CACHE_DIR]
#
# With CACHE_DIR, the imported Debian root is saved there and loaded on the next run instead of
# being debootstrapped again (about 3 minutes). Needs root, debootstrap and a running dockerd.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${1:-}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
base=icefjord-base/debian:bookworm

say() { printf '== %s\n' "$*"; }

if ! docker image inspect "$base" >/dev/null 2>&1; then
  if [[ -n "$cache" && -f "$cache/debian-bookworm-slim.tar" ]]; then
    say "loading $base from $cache"
    docker load -q -i "$cache/debian-bookworm-slim.tar"
  else
    root="$(mktemp -d)"
    trap 'rm -rf "$root"' EXIT
    say "debootstrap Debian bookworm (minbase) from $mirror"
    debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 \
      || { tail -20 "$root.log" >&2; exit 1; }
    rm -f "$root.log"
    cp "$here/debian.sources" "$root/etc/apt/sources.list.d/debian.sources"
    rm -f "$root/etc/apt/sources.list"
    # Slim as debian:bookworm-slim is: no documentation, manuals or translations, now or
    # from later installs, and no apt caches left in a layer.
    cp "$here/dpkg-slim.cfg" "$root/etc/dpkg/dpkg.cfg.d/01-slim"
    cp "$here/apt-slim.conf" "$root/etc/apt/apt.conf.d/01-slim"
    find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    # The folders stay: package scripts (update-alternatives) link into /usr/share/man/man1.
    find "$root/usr/share/man" "$root/usr/share/info" "$root/usr/share/locale" -not -type d \
      -not -name locale.alias -delete
    rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/var/log/*.log
    say "importing $base"
    tar -C "$root" -c . | docker import - "$base" >/dev/null
    if [[ -n "$cache" ]]; then
      mkdir -p "$cache"
      docker save -o "$cache/debian-bookworm-slim.tar" "$base"
    fi
  fi
fi

context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
cp /etc/ssl/certs/ca-certificates.crt "$context/host-ca.crt"
if [[ -f /etc/ssl/certs/java/cacerts ]]; then
  cp /etc/ssl/certs/java/cacerts "$context/host-cacerts"
else
  : >"$context/host-cacerts"
fi
for name in python:3.11 jre:17 maven:3; do
  file="$here/${name%%:*}.Dockerfile"
  cp "$file" "$context/Dockerfile"
  say "building icefjord-base/$name"
  docker build -q --build-arg BASE_IMAGE="$base" -t "icefjord-base/$name" "$context" >/dev/null
done
docker image ls --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' icefjord-base/*
