#!/usr/bin/env bash
# Build-stage step of every service image: install one service into /opt/venv with only what
# it imports (deploy/docker/requirements/<image>.txt, written by lock.py), then drop the
# project packages the service never imports (the CLI, the other services).
#
#   install.sh deps REQUIREMENTS_FILE [compiled]     the pinned distributions (a cached layer)
#   install.sh service REQUIREMENTS_FILE [compiled]  the service from /src
#
# With `compiled`, the per-record modules are compiled with mypyc (setup.py); that needs gcc
# and the Python headers, which `deps` installs into the build stage when missing.
set -euo pipefail
step="$1"
requirements="$2"
compiled="${3:-}"
venv=/opt/venv
site="$venv/lib/python3.11/site-packages"

if [[ "$step" == deps ]]; then
  python -m venv "$venv"
  "$venv/bin/pip" install --no-deps -r "$requirements"
  if [[ "$compiled" == compiled ]]; then
    packages=(gcc libc6-dev)
    include="$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
    # The official python images carry the headers; Debian's Python (the stand-in) does not.
    [[ -f "$include/Python.h" ]] || packages+=(python3-dev)
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}"
    "$venv/bin/pip" install mypy==2.4.1 setuptools==84.2.1
  fi
  exit 0
fi

# A wheel of native/ the image build was given (the normalizer's compiled record path, the
# writer's compiled change path). It goes in first: mypyc reads its types.
if compgen -G "/tmp/native-wheels/*.whl" >/dev/null; then
  "$venv/bin/pip" install --no-deps /tmp/native-wheels/*.whl
fi

# "# modules: contracts services.cdc_normalizer shared" lists what the service imports.
read -r -a keep <<<"$(sed -n 's/^# modules: //p' "$requirements")"
if [[ "$compiled" == compiled ]]; then
  ICEFJORD_MYPYC=1 ICEFJORD_MYPYC_ONLY="${keep[*]}" "$venv/bin/pip" wheel --no-deps --no-build-isolation -w /tmp/wheels /src
  # mypy goes; its runtime library (librt, in the lock) stays: the compiled modules import it.
  "$venv/bin/pip" uninstall -y mypy pathspec ast-serialize setuptools
else
  "$venv/bin/pip" wheel --no-deps -w /tmp/wheels /src
fi
"$venv/bin/pip" install --no-deps /tmp/wheels/icefjord-*.whl
rm -rf /tmp/wheels

for path in "$site"/icefjord "$site"/contracts "$site"/shared "$site"/services/*/; do
  path="${path%/}"
  name="${path#"$site"/}"
  name="${name//\//.}"
  [[ "$name" == services.__pycache__ ]] && { rm -rf "$path"; continue; }
  if [[ ! " ${keep[*]} " =~ \ $name\  ]]; then
    rm -rf "$path"
  fi
done
rm -f "$venv"/bin/icefjord
# What only builds need goes too: the venv's own setuptools, then pip itself.
"$venv/bin/pip" uninstall -y setuptools pip >/dev/null 2>&1
"$venv/bin/python" -m compileall -q "$venv/lib"
