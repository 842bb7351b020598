#!/usr/bin/env bash
# Installs, from Debian's packages, what meshlayout needs to build, test and benchmark.
#   bash scripts/install-deps.sh [--fuzz] [--bench]
# Idempotent: does nothing when every package is already installed. Needs root (or sudo).
set -euo pipefail
packages=(
  cmake ninja-build g++ pkg-config
  libre2-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin libopenblas-dev
  libsentencepiece-dev sentencepiece python3-sentencepiece libicu-dev
  pybind11-dev python3-dev python3-numpy python3-pytest clang-format
  python3-venv python3-pip python3-setuptools python3-wheel
  chromium python3-pil   # plan --html / layout --svg rendered and screenshot in a test
)
for arg in "$@"; do
  case "$arg" in
    --fuzz) packages+=(clang libclang-rt-14-dev) ;;      # the fuzz stage (libFuzzer)
    --bench) packages+=(python3-torch) ;;                # the PyTorch peers of bench/*.sh
    *) echo "install-deps: unknown option '$arg'; expected --fuzz or --bench" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
