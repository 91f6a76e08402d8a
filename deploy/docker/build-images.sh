#!/usr/bin/env bash
# Build the five service images (make images): icefjord/<service>:<version>.
#
#   deploy/docker/build-images.sh [SERVICE ...]
#
# ICEFJORD_IMAGE_BASES chooses the base images:
#   public  the Dockerfiles' defaults (python:3.11-slim, eclipse-temurin, maven) from a registry
#   local   stand-ins built from Debian's packages by base/build-bases.sh, for machines that
#           reach no image registry (these development machines)
#   auto    (default) public when that image is here or a registry answers; local when the
#           stand-ins are already built or no registry answers
# ICEFJORD_IMAGE_CACHE: where build-bases.sh keeps its imported Debian root between runs.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)"
bases="${ICEFJORD_IMAGE_BASES:-auto}"
services=("$@")
((${#services[@]})) || services=(cdc-normalizer schema-watcher iceberg-writer maintainer console)

default_python="$(sed -n 's/^ARG PYTHON_IMAGE=//p' deploy/docker/cdc-normalizer.Dockerfile)"
if [[ "$bases" == auto ]]; then
  if docker image inspect "$default_python" >/dev/null 2>&1; then
    bases=public
  elif docker image inspect icefjord-base/python:3.11 >/dev/null 2>&1; then
    bases=local
  elif timeout 30 docker pull -q "$default_python" >/dev/null 2>&1; then
    bases=public
  else
    echo "== no registry answers for $default_python: building local stand-in bases"
    bases=local
  fi
fi
args=()
if [[ "$bases" == local ]]; then
  deploy/docker/base/build-bases.sh "${ICEFJORD_IMAGE_CACHE:-}"
  args=(--build-arg PYTHON_IMAGE=icefjord-base/python:3.11
        --build-arg JRE_IMAGE=icefjord-base/jre:17
        --build-arg MAVEN_IMAGE=icefjord-base/maven:3)
fi
native_wheel() {
  # The compiled paths of the normalizer's records and the writer's changes, built on this
  # machine (cargo, maturin) for the image to install; without it the image takes the
  # Python path, and says so here. Built again only when native/ changed: each build's wheel
  # differs in its bytes, and a new one would rebuild both images from that layer on.
  local python="${ICEFJORD_PYTHON:-$root/.venv/bin/python}"
  local wheels=deploy/docker/native-wheels
  local digest=""
  [[ -x "$python" ]] && digest="$("$python" -c \
    'import sys; from pathlib import Path; from icefjord.local.artifacts import module_digest
print(module_digest(Path(sys.argv[1])))' native)"
  if [[ -n "$digest" && "$(cat "$wheels/.source-digest" 2>/dev/null)" == "$digest" ]] \
      && compgen -G "$wheels/*.whl" >/dev/null; then
    return
  fi
  rm -f "$wheels"/*.whl "$wheels/.source-digest"
  if command -v cargo >/dev/null && [[ -x "$python" ]] \
      && "$python" -m pip wheel --quiet --no-deps -w "$wheels" ./native; then
    echo "$digest" >"$wheels/.source-digest"
    echo "== native/ built: $(basename "$wheels"/*.whl)"
  else
    echo "== WARNING: native/ not built (needs cargo and $python): the $service image takes the Python path" >&2
  fi
}

for service in "${services[@]}"; do
  case "$service" in cdc-normalizer | iceberg-writer) native_wheel ;; esac
  tag="icefjord/$service:$version"
  echo "== building $tag ($bases bases)"
  start=$SECONDS
  log="$(mktemp)"
  # The legacy builder (BuildKit's `# syntax` front end and buildx need a registry) keeps each
  # stage as an untagged image, the cache of the next build. Each stage is tagged and
  # labelled, the image too, so the ones a rebuild replaces can be pruned (below) without
  # touching the cache or anyone else's images.
  dockerfile="deploy/docker/$service.Dockerfile"
  targets=()
  while read -r stage; do
    [[ "$stage" == runtime ]] || targets+=("$stage:icefjord-stage/$service-$stage:$version")
  done < <(sed -n 's/^FROM .* AS \([a-z]*\)$/\1/p' "$dockerfile")
  targets+=("runtime:$tag")
  for target in "${targets[@]}"; do
    if ! DOCKER_BUILDKIT=0 docker build "${args[@]}" -f "$dockerfile" --target "${target%%:*}" \
        --label "io.icefjord.build=$service" -t "${target#*:}" . >"$log" 2>&1; then
      tail -40 "$log" >&2
      rm -f "$log"
      echo "building ${target#*:} failed" >&2
      exit 1
    fi
  done
  rm -f "$log"
  # What this build replaced: the previous image and stages, now untagged.
  docker image prune -f --filter "label=io.icefjord.build=$service" >/dev/null
  echo "   built in $((SECONDS - start)) s"
done
docker image ls --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' 'icefjord/*'
