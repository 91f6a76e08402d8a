#!/usr/bin/env bash
# Install Docker Compose v2 as a Docker CLI plugin, built from its Go module where no release
# binary can be downloaded (the Go module proxy is reachable; GitHub releases are not). Its
# module carries exclude directives, so `go install` refuses it: it is built from the
# downloaded module folder. About 3 CPU minutes once; the binary is cached in CACHE_DIR.
#
#   deploy/docker/base/build-compose.sh CACHE_DIR
set -euo pipefail
version=v2.40.3
cache="${1:?usage: build-compose.sh CACHE_DIR}"
binary="$cache/docker-compose-$version"
plugins="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"

if docker compose version 2>/dev/null | grep -q "$version"; then
  exit 0
fi
if [[ ! -x "$binary" ]]; then
  command -v go >/dev/null || { echo "building Docker Compose needs Go on PATH" >&2; exit 1; }
  echo "== building Docker Compose $version from the Go module proxy"
  dir="$(go mod download -json "github.com/docker/compose/v2@$version" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  cp -r "$dir/." "$work"
  chmod -R u+w "$work"
  mkdir -p "$cache"
  (cd "$work" && go build -trimpath \
    -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$version" \
    -o "$binary.partial" ./cmd)
  mv "$binary.partial" "$binary"
fi
mkdir -p "$plugins"
cp "$binary" "$plugins/docker-compose"
docker compose version
