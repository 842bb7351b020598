#!/usr/bin/env bash
# fuzz/run.sh [SECONDS [LIBFUZZER FLAGS...]] — build the libFuzzer targets (clang, ASan +
# UBSan) in fuzz-build/ and run each for SECONDS (default 300), one after the other, on a
# scratch copy of its seed corpus (fuzz/corpus-work-<target>-<time>/, git-ignored), so
# fuzz/corpus/ is never modified.
# Prints one summary line per target; exits non-zero if any target reports a finding
# (crash, sanitizer report, uncaught exception, leak, timeout or out-of-memory).
# A finding's reproducer is in the scratch dir's artifacts/; replay it with
#   fuzz-build/fuzz/<target>_fuzz <artifact>
# Extra flags go to every target, e.g. `fuzz/run.sh 300 -fork=1 -ignore_crashes=1` to keep
# fuzzing past a known finding (each crash still lands in artifacts/ and fails the run).
# FUZZ_JOBS=N fuzzes up to N targets at once (default 1; scripts/test.sh's smoke run fuzzes all
# three at once, so the stage takes SECONDS instead of three times SECONDS).
set -uo pipefail

seconds="${1:-300}"
extra_flags=("${@:2}")
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/fuzz-build"
# FUZZ_TARGETS="rules_file safetensors_header" runs only those targets.
read -r -a targets <<<"${FUZZ_TARGETS:-rules_file layout_text safetensors_header}"

cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMESHLAYOUT_SANITIZE=address,undefined \
  -DMESHLAYOUT_BUILD_FUZZERS=ON \
  -DMESHLAYOUT_BUILD_TESTS=OFF \
  -DMESHLAYOUT_BUILD_BENCHMARKS=OFF -DMESHLAYOUT_WERROR=ON >"$root/fuzz-build.configure.log" 2>&1 ||
  { cat "$root/fuzz-build.configure.log"; echo "fuzz/run.sh: configure failed" >&2; exit 2; }
rm -f "$root/fuzz-build.configure.log"
ninja -C "$build" ${NINJA_JOBS:+-j "$NINJA_JOBS"} "${targets[@]/%/_fuzz}" || { echo "fuzz/run.sh: build failed" >&2; exit 2; }

export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"

stamp="$(date +%Y%m%d-%H%M%S)"
fuzz_target() {  # fuzz_target <target>: fuzzes it in its scratch dir; its exit code in $work/rc
  local work="$root/fuzz/corpus-work-$1-$stamp"
  "$build/fuzz/${1}_fuzz" \
    -max_total_time="$seconds" -max_len=4096 -timeout=30 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" "${extra_flags[@]}" \
    "$work/corpus" >"$work/fuzz.log" 2>&1
  echo $? >"$work/rc"
}
for target in "${targets[@]}"; do
  work="$root/fuzz/corpus-work-$target-$stamp"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp -R "$root/fuzz/corpus/$target/." "$work/corpus/"
  rm -f "$work/corpus/README"  # how the seeds were made, not a seed
  echo "== $target: fuzzing for ${seconds}s (log: $work/fuzz.log)"
  fuzz_target "$target" &
  while (($(jobs -rp | wc -l) >= ${FUZZ_JOBS:-1})); do wait -n; done
done
wait

status=0
summaries=()
for target in "${targets[@]}"; do
  work="$root/fuzz/corpus-work-$target-$stamp"
  log="$work/fuzz.log"
  rc="$(cat "$work/rc" 2>/dev/null || echo '?')"
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  last="$(grep -E '^#[0-9]+' "$log" | tail -n 1)"
  [[ -n "$execs" ]] || execs="$(sed -n 's/^#\([0-9]*\).*/\1/p' <<<"$last")"  # -fork mode
  cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")"
  ft="$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")"
  corp="$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")"
  findings="$(find "$work/artifacts" -type f | wc -l)"
  if [[ $rc != 0 || $findings -ne 0 ]]; then
    status=1
    verdict="FINDING (exit $rc): $(find "$work/artifacts" -type f | head -n 3 | tr '\n' ' ')"
    grep -m2 -E 'what\(\)|FINDING|runtime error|ERROR: ' "$log" | sed 's/^/    /'
  else
    verdict="ok"
  fi
  summaries+=("$(printf '%-18s %ss  execs=%s  cov=%s  ft=%s  corpus=%s  %s' \
    "$target" "$seconds" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$verdict")")
done

echo "== summary"
printf '%s\n' "${summaries[@]}"
exit "$status"
