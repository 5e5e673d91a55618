#!/usr/bin/env python3
"""Where a training step's memory goes, measured (the estimator's calibration).

For each model of estimator_accuracy.py and each sequence length: one warm-up step (so AdamW's
state exists), then a probed step that records
- memory_allocated() before the forward, after each transformer block's forward, after the
  forward returned the loss, and max_memory_allocated() over forward + backward;
- every tensor saved for backward (torch.autograd.graph.saved_tensors_hooks), deduplicated by
  storage, attributed to the block whose forward saved it (or to "outside" the blocks), with
  shape and dtype for block 0 and for the outside.

    activation_probe.py OUT.json [MODEL ...]
"""
import json
import sys

import estimator_accuracy as ea

GIB = float(1 << 30)


def probe(name, seq):
    import torch
    from transformers import AutoModelForCausalLM

    config = ea.make_config(name)
    batch = ea.MODELS[name][2]
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    blocks = model.transformer.h if hasattr(model, "transformer") else model.model.layers
    where = {"block": "outside"}
    marks = []

    def pre(i):
        def hook(module, args):
            where["block"] = i
        return hook

    def post(i):
        def hook(module, args, output):
            where["block"] = "outside"
            marks.append(torch.cuda.memory_allocated())
        return hook

    handles = []
    for i, blk in enumerate(blocks):
        handles.append(blk.register_forward_pre_hook(pre(i)))
        handles.append(blk.register_forward_hook(post(i)))
    saved = {}
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(t):
        try:
            st = t.untyped_storage()
            key = (st.data_ptr(), st.device.type)
            if st.device.type == "cuda" and key not in saved and key[0] not in params:
                saved[key] = (where["block"], st.nbytes(), list(t.shape), str(t.dtype))
        except Exception:  # noqa: BLE001  (sparse, nested: not in these models)
            pass
        return t

    def step(probed):
        ids = torch.randint(0, config.vocab_size, (batch, seq), device="cuda")
        torch.cuda.synchronize()
        m0 = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        marks.clear()
        saved.clear()
        if probed:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(input_ids=ids, labels=ids).loss
        else:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
        torch.cuda.synchronize()
        m1 = torch.cuda.memory_allocated()
        fwd_peak = torch.cuda.max_memory_allocated()
        loss.backward()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return m0, m1, fwd_peak, peak, list(marks)

    step(False)
    m0, m1, fwd_peak, peak, marks_ = step(True)
    per_block = {}
    for blk, nbytes, shape, dtype in saved.values():
        per_block[str(blk)] = per_block.get(str(blk), 0) + nbytes
    detail = lambda b: sorted(([n, s, d] for k, n, s, d in saved.values() if k == b),
                              key=lambda x: -x[0])
    sbh = seq * batch * config.hidden_size
    out = {"model": name, "seq": seq, "batch": batch, "hidden": config.hidden_size,
           "sbh": sbh, "before_forward": m0, "after_forward": m1, "forward_peak": fwd_peak,
           "step_peak": peak, "after_each_block": marks_, "saved_per_block": per_block,
           "saved_block0": detail(0), "saved_outside": detail("outside")}
    print(f"{name} seq {seq}: before fwd {m0 / GIB:.3f}, after fwd {m1 / GIB:.3f}, "
          f"fwd peak {fwd_peak / GIB:.3f}, step peak {peak / GIB:.3f} GiB; block0 saved "
          f"{per_block.get('0', 0) / sbh:.2f} sbh bytes, outside {per_block.get('outside', 0) / GIB:.3f} GiB",
          flush=True)
    for h in handles:
        h.remove()
    del model, opt
    torch.cuda.empty_cache()
    return out


def main():
    import torch

    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    names = sys.argv[2:] or list(ea.MODELS)
    results = []
    for name in names:
        for seq in ea.MODELS[name][3]:
            results.append(probe(name, seq))
    with open(sys.argv[1], "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
