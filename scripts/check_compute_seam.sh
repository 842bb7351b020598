#!/usr/bin/env bash
# The compute seam's rule (docs/design.md "Compute and memory seam"): ops, layers, models,
# optimizers and plans reach shard memory only through kernels (src/meshlayout/kernels/), never by
# touching an Array::Shard's buffer, borrowing one, or reinterpreting bytes themselves. This check
# fails on any such use in src/meshlayout/{ops,nn,models,train,plan} outside the tests and the files
# listed in scripts/compute_seam_pending.txt — the files not moved behind the seam yet, which
# may only shrink (a listed file that no longer needs the exemption is an error too).
#   bash scripts/check_compute_seam.sh
set -euo pipefail
cd "$(dirname "$0")/.."
pattern='(\.|->)buffer\b|DeviceBuffer::borrowed|reinterpret_cast<'
mapfile -t pending < <(grep -v '^\s*\(#\|$\)' scripts/compute_seam_pending.txt)
is_pending() { local f; for f in "${pending[@]}"; do [[ $f == "$1" ]] && return 0; done; return 1; }
violations=0
while IFS= read -r file; do
  case "$file" in *_test.cc | *_test_util.h | *_test.h | *testing*) continue ;; esac
  if is_pending "$file"; then continue; fi
  if grep -nE "$pattern" "$file" >/tmp/seam.$$ 2>/dev/null; then
    sed "s|^|$file:|" /tmp/seam.$$ >&2
    violations=$((violations + $(wc -l </tmp/seam.$$)))
  fi
done < <(git ls-files 'src/meshlayout/ops/*' 'src/meshlayout/nn/*' 'src/meshlayout/models/*' \
           'src/meshlayout/train/*' 'src/meshlayout/plan/*' | grep -E '\.(h|cc)$')
rm -f /tmp/seam.$$
stale=()
for f in "${pending[@]}"; do
  if [[ ! -f $f ]] || ! grep -qE "$pattern" "$f"; then stale+=("$f"); fi
done
if ((violations)); then
  echo "compute seam: $violations line(s) above touch shard bytes outside kernels/; move the loop into a kernel (src/meshlayout/kernels/)" >&2
fi
if ((${#stale[@]})); then
  echo "compute seam: scripts/compute_seam_pending.txt lists files that no longer touch shard bytes (or are gone); remove them: ${stale[*]}" >&2
fi
((violations == 0 && ${#stale[@]} == 0)) || exit 1
echo "compute seam: no op, layer, model, optimizer or plan touches shard bytes outside kernels/ (${#pending[@]} files still pending)"
