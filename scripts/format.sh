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
    # --dry-run --Werror names every place that differs (file:line:col: error: ...); 100 files
    # a process, two processes at a time (one clang-format per file took 20 s of test.sh).
    rc=0
    out=$(printf '%s\0' "${files[@]}" | xargs -0 -P2 -n 100 clang-format --dry-run --Werror 2>&1) ||
      rc=$?
    mapfile -t differing < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' \
                             <<<"$out" | sort -u)
    if ((rc != 0 && ${#differing[@]} == 0)); then
      echo "format: clang-format failed:" >&2
      head -n 20 <<<"$out" >&2
      exit 2
    fi
    if ((${#differing[@]})); then
      echo "format: ${#differing[@]} file(s) differ from .clang-format; run 'bash scripts/format.sh':" >&2
      printf '  %s\n' "${differing[@]}" >&2
      exit 1
    fi
    echo "format: ${#files[@]} files match .clang-format" ;;
  *) echo "format: unknown option '$1'; expected --check or nothing" >&2; exit 2 ;;
esac
