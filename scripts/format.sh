#!/usr/bin/env bash
# Formats every tracked C++ file with .clang-format (Debian 12's clang-format 14, the version
# the style was fixed with; another version may format a few lines differently).
#   bash scripts/format.sh           rewrite the files in place
#   bash scripts/format.sh --check   list the files that differ and exit 1 if any do
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format: clang-format is not installed (apt-get install clang-format)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cpp' '*.cu' '*.cuh')
case "${1:-}" in
  "") clang-format -i "${files[@]}" ;;
  --check)
    differing=()
    for f in "${files[@]}"; do
      clang-format "$f" | cmp -s - "$f" || differing+=("$f")
    done
    if ((${#differing[@]})); then
      echo "format: ${#differing[@]} file(s) differ from .clang-format; run 'bash scripts/format.sh':" >&2
      printf '  %s\n' "${differing[@]}" >&2
      exit 1
    fi
    echo "format: ${#files[@]} files match .clang-format" ;;
  *) echo "format: unknown option '$1'; expected --check or nothing" >&2; exit 2 ;;
esac
