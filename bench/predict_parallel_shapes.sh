#!/usr/bin/env bash
# The "Prediction" section's big-shape figures of bench/RESULTS.md: one rank of a 64-GPU
# torchtitan-shaped job predicted on the CPU, wall and peak RSS by /usr/bin/time -v.
#
#   bench/predict_parallel_shapes.sh CASE [RANK...]     (from the repository root, after a build)
#
# CASE: llama8b-pp4-fsdp2-tp8 (Llama-3-8B, PP 4 x FSDP2 2 x TP 8, seq 8192, 1f1b, 4 microbatches
# of 1), llama70b-pp4-fsdp2-tp8 (Llama-3-70B, the same layout), deepseek-v3-ep8 (DeepSeek-V3's
# shape, 61 layers, 256 routed experts, EP 8 with FSDP2 over 64 GPUs, seq 4096; -ac: with full
# activation checkpointing; deepseek-v3-pp4-ep8: 60 layers in PP 4 x FSDP2 16 with EP 8 inside
# each stage, 1f1b, 4 microbatches of 1, torchtitan's DeepSeek-V3 layout), llama8b-cp8-fsdp8 (Llama-3-8B, seq 131072 split over CP 8, FSDP2 over
# the 64 GPUs), llama8b-fsdp8 and llama8b-fsdp8-compile (Llama-3-8B, FSDP2 over 8 GPUs, seq 8192,
# no KV cache in the training forward; -compile: each block compiled before fully_shard; rank 0
# by default). RANK default: the first and the last rank. Logs and the time reports go to $OUT
# (default /tmp/fragscope-shapes).
set -euo pipefail
case_name=${1:?usage: $0 CASE [RANK...]}
shift
ranks=("$@")
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/fragscope-shapes}
mkdir -p "$out"
export PYTHONPATH=$root/hooks/python FRAGSCOPE_LIB_DIR=$root/build/hooks
export FRAGSCOPE_BIN=$root/build/fragscope

llama8b='{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
  "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
  "vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0,
  "tie_word_embeddings": false}'
llama70b='{"model_type": "llama", "hidden_size": 8192, "num_hidden_layers": 80,
  "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 28672,
  "vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0,
  "tie_word_embeddings": false}'

case $case_name in
  llama8b-pp4-fsdp2-tp8|llama70b-pp4-fsdp2-tp8)
    config=$out/${case_name%%-*}.json
    if [[ $case_name == llama8b* ]]; then echo "$llama8b" >"$config"; else echo "$llama70b" >"$config"; fi
    flags=(--config "$config" --seq 8192 --micro-batch 1 --pp 4 --pp-schedule 1f1b
           --parallel fsdp2 --tp 8 --world-size 64)
    ((${#ranks[@]})) || ranks=(0 63)
    ;;
  llama8b-fsdp8|llama8b-fsdp8-compile)
    config=$out/llama8b.json
    echo "$llama8b" >"$config"
    flags=(--config "$config" --seq 8192 --micro-batch 1 --parallel fsdp2 --world-size 8
           --set use_cache=false)
    [[ $case_name == *-compile ]] && flags+=(--compile)
    ((${#ranks[@]})) || ranks=(0)
    ;;
  llama8b-cp8-fsdp8)
    config=$out/llama8b.json
    echo "$llama8b" >"$config"
    flags=(--config "$config" --seq 131072 --micro-batch 1 --parallel fsdp2 --cp 8
           --world-size 64)
    ((${#ranks[@]})) || ranks=(0 63)
    ;;
  deepseek-v3-ep8|deepseek-v3-ep8-ac|deepseek-v3-pp4-ep8)
    config=$out/$case_name.json
    layers=61
    # Four pipeline stages need a multiple of 4 layers (uneven splits are not modeled): 60.
    [[ $case_name == *-pp4-* ]] && layers=60
    python3 - "$config" "$layers" <<'PY'
import json, sys
# DeepSeek-V3's shape (its config.json): 61 layers (the first 3 dense), 256 routed experts of
# width 2048 and one shared, 8 per token, MLA attention; no multi-token-prediction module.
json.dump({"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": int(sys.argv[2]),
           "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
           "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
           "n_group": 8, "topk_group": 4, "num_attention_heads": 128,
           "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
           "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
           "vocab_size": 129280, "max_position_embeddings": 4096,
           "tie_word_embeddings": False}, open(sys.argv[1], "w"))
PY
    flags=(--config "$config" --seq 4096 --micro-batch 1 --parallel fsdp2 --ep 8
           --world-size 64)
    [[ $case_name == *-ac ]] && flags+=(--recompute)
    [[ $case_name == *-pp4-* ]] && flags+=(--pp 4 --pp-schedule 1f1b)
    ((${#ranks[@]})) || ranks=(0 63)
    ;;
  *) echo "unknown case $case_name" >&2; exit 2 ;;
esac

for rank in "${ranks[@]}"; do
  log=$out/$case_name.rank$rank.fslog
  /usr/bin/time -v python3 -m fragscope predict "${flags[@]}" --rank "$rank" --out "$log" \
    >"$out/$case_name.rank$rank.out" 2>"$out/$case_name.rank$rank.time"
  wall=$(grep "Elapsed (wall" "$out/$case_name.rank$rank.time" | awk '{print $NF}')
  rss=$(grep "Maximum resident" "$out/$case_name.rank$rank.time" | awk '{print $NF}')
  echo "$case_name rank $rank: wall $wall, peak RSS $((rss / 1024)) MiB"
  grep -E "predicted|^peak|rank " "$out/$case_name.rank$rank.out" || true
  "$FRAGSCOPE_BIN" analyze "$log" --gpu h100-80gb --threads 1 >"$out/$case_name.rank$rank.analyze" \
    && echo "  fragscope analyze: ok" || echo "  fragscope analyze: failed (see $out/$case_name.rank$rank.analyze)"
done
