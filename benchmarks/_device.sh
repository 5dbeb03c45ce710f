# shellcheck shell=bash
# Sourced by the device scripts (benchmarks/device_run.sh, experiments/device_crt.sh): the
# one way they fetch what the device machine lacks.

# pinned_site SITE PY312 PKG...: the cp312 manylinux wheels of PKG at constraints.txt's
# versions (no dependencies: each one is named), installed with PY312 into the --target
# folder SITE; a PKG written sdist:NAME is published as a source distribution only (pure
# Python) and is built into a wheel here. Run from the repository root.
pinned_site() {
  local site=$1 py312=$2
  shift 2
  local wheels="$site.wheels" specs="" sdists="" p v
  rm -rf "$site" "$wheels" && mkdir -p "$wheels"
  for p in "$@"; do
    local name=${p#sdist:}
    # constraints.txt spells names with - or _ and in either case
    v=$(grep -i -E "^${name//-/[-_]}==" constraints.txt | head -1 | cut -d= -f3)
    [ -n "$v" ] || { echo "no version of $name in constraints.txt" >&2; return 2; }
    if [[ $p == sdist:* ]]; then sdists="$sdists $name==$v"; else specs="$specs $name==$v"; fi
  done
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d "$wheels" $specs || return 1
  if [ -n "$sdists" ]; then
    # shellcheck disable=SC2086
    python3 -m pip wheel -q --no-deps -w "$wheels" $sdists || return 1
  fi
  "$py312" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$wheels"/*.whl
}
