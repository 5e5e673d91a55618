#!/bin/bash
# Steps of scripts/gpu_validate.sh as their CPU dry run (ctest scripts.gpu.dry_run.*: three groups
# that ctest runs side by side): every part but the GPU runs themselves, on fragscope's simulated
# device. The steps given (default: all of predict, bigjob, pools, observecost, wheel, parallel,
# predict3, contexts, compile and adapters) must end "ok", but observecost and wheel, which must
# skip cleanly.
#   scripts/gpu/dry_run.sh BUILD_DIR OUT_DIR [STEP ...]
set -u
if [ $# -lt 2 ]; then
  echo "usage: scripts/gpu/dry_run.sh BUILD_DIR OUT_DIR [STEP ...]" >&2
  exit 2
fi
if ! python3 -c "import torch, transformers" 2>/dev/null; then
  echo "skipped: torch or transformers is not installed"
  exit 0
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$1
out=$2
shift 2
steps=${*:-predict bigjob pools observecost wheel parallel predict3 contexts compile adapters}
rm -rf "$out"
CUDA_VISIBLE_DEVICES='' GPU_VALIDATE_DRY_RUN=1 GPU_VALIDATE_BUDGET_S=${GPU_VALIDATE_BUDGET_S:-840} \
  GPU_VALIDATE_STEPS="$steps" "$root/scripts/gpu_validate.sh" "$out" "$build"
rc=$?
status() { awk -F'\t' -v s="$1" '$1 == s {print $2}' "$out/steps.tsv"; }
for s in $steps; do
  case "$s" in
    observecost | wheel)
      case "$(status "$s")" in skipped:*) ;; *) echo "FAILED: step $s did not skip"; rc=1 ;; esac ;;
    *)
      [ "$(status "$s")" = ok ] || { echo "FAILED: step $s: $(status "$s")"; rc=1; } ;;
  esac
done
exit "$rc"
