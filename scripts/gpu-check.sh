#!/usr/bin/env bash
# Native verification on a supported GPU (sm_90 + TileLang): every GPU-marked test, a
# compute-sanitizer memcheck subset (including -1 and out-of-range pages), and the
# benchmark suite. Run from the repository root with the packages importable, e.g.
#   PYTHONPATH=$(ls -d packages/*/src | paste -sd:):. bash scripts/gpu-check.sh [results-dir]
# STEPS selects parts ("tests sanitizer bench"); BENCH_ARGS passes options to the suite.
set -uo pipefail
set -f  # test ids contain [...]: no globbing
out=${1:-${OUT:-gpu-results}}
mkdir -p "$out"
steps=${STEPS:-"tests sanitizer bench"}
export MATE_REQUIRE_GPU=1  # GPU tests fail the run instead of skipping when no usable GPU is found (conftest.py)
export MATE_TEST_PRECOMPILE=1  # the GPU tests' kernels compile in parallel before the tests run (kernels conftest.py)
rc=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
mqa=packages/mate-kernels-musa/tests/test_mqa_native.py
sparse=packages/mate-kernels-musa/tests/test_sparse_native.py
paths=packages/mate-kernels-musa/tests/test_sparse_native_paths.py
union=packages/mate-kernels-musa/tests/test_sparse_union_native.py
if [[ $steps == *tests* ]]; then
  echo "=== pytest -m \"not compile\" packages (GPU tests + CPU suites on this machine; compile tests run in CI)"
  timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -m "not compile" packages benchmarks/tests -q -p no:cacheprovider -rfE 2>&1 \
    | grep -v "INFO" > "$out/tests.txt"; r=$?; rc=$((rc | r))
  grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.txt" | tail -30
fi
if [[ $steps == *sanitizer* ]]; then
  echo "=== compute-sanitizer memcheck subset"
  : > "$out/sanitizer.txt"
  for sel in "$mqa::test_decode_matches_reference[8-bf16] $mqa::test_decode_unaligned_cache_element_path[dtype0-8] $mqa::test_prefill_matches_reference[5-3-ragged-bf16] $mqa::test_prefill_matches_reference[200-1000-ragged-bf16] $mqa::test_decode_broadcast_and_4d_query $mqa::test_indexer_score_matches_reference[2-100-9-False-True-bf16] $mqa::test_indexer_score_matches_reference[2-300-4400-True-True-bf16] $mqa::test_score_variants_match_reference[bf16-keys-overlap-full-latewait-trim-evictfirst-cmajor-mirror-spread-tpc32-950-5000-stretch] $mqa::test_prefill_matches_reference[2100-520-causal-bf16] $mqa::test_indexer_score_matches_reference[2-600-148-True-True-bf16]" \
             "$sparse $paths -k memcheck" "$union -k memcheck"; do
    # No precompile here: its 16 worker processes would each run under the sanitizer and use up the
    # timeout; these few tests build their kernels on first use (cached by the tests step).
    # shellcheck disable=SC2086  # the selection is a word list on purpose
    MATE_TEST_PRECOMPILE=0 timeout "${SAN_TIMEOUT:-150}" compute-sanitizer --tool memcheck --error-exitcode 1 \
      python3 -m pytest -m gpu -q -p no:cacheprovider $sel >> "$out/sanitizer.txt" 2>&1; r=$?; rc=$((rc | r))
    if [[ $r == 124 ]]; then echo "memcheck: timed out after ${SAN_TIMEOUT:-150} s (SAN_TIMEOUT): $sel" | tee -a "$out/sanitizer.txt"; fi
  done
  grep -E "ERROR SUMMARY|passed|failed|Invalid" "$out/sanitizer.txt" | head -12
fi
if [[ $steps == *bench* ]]; then
  echo "=== python -m benchmarks"
  timeout "${BENCH_TIMEOUT:-400}" python3 -m benchmarks --out "$out" ${BENCH_ARGS:-} 2>&1 \
    | grep -v "INFO\|Warning\|warn" > "$out/bench.txt"; r=$?; rc=$((rc | r))
  tail -45 "$out/bench.txt"
fi
exit $rc
