#!/bin/bash
# The second round's steps of scripts/gpu_validate.sh as their CPU dry run (ctest
# scripts.gpu.round2_dry_run), with the third round's predict3 and contexts and the compile and
# adapters steps: predict, bigjob, pools, parallel, predict3, contexts, compile and adapters must
# end "ok" (every part but the GPU runs themselves, on fragscope's simulated device), observecost
# and wheel must skip cleanly.
#   scripts/gpu/round2_dry_run.sh BUILD_DIR OUT_DIR
set -u
if [ $# -ne 2 ]; then
  echo "usage: scripts/gpu/round2_dry_run.sh BUILD_DIR OUT_DIR" >&2
  exit 2
fi
if ! python3 -c "import torch, transformers" 2>/dev/null; then
  echo "skipped: torch or transformers is not installed"
  exit 0
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$2"
CUDA_VISIBLE_DEVICES='' GPU_VALIDATE_DRY_RUN=1 GPU_VALIDATE_BUDGET_S=${GPU_VALIDATE_BUDGET_S:-840} \
  GPU_VALIDATE_STEPS="predict bigjob pools observecost wheel parallel predict3 contexts compile adapters" \
  "$root/scripts/gpu_validate.sh" "$2" "$1"
rc=$?
status() { awk -F'\t' -v s="$1" '$1 == s {print $2}' "$2/steps.tsv"; }
for s in predict bigjob pools parallel predict3 contexts compile adapters; do
  [ "$(status $s "$2")" = ok ] || { echo "FAILED: step $s: $(status $s "$2")"; rc=1; }
done
for s in observecost wheel; do
  case "$(status $s "$2")" in skipped:*) ;; *) echo "FAILED: step $s did not skip"; rc=1 ;; esac
done
exit "$rc"
