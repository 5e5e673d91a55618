"""Lists the tensors a transformers training step saves for its backward, per decoder layer, on
a CPU: the model runs under fragscope's predictor (fake CUDA tensors, bf16 autocast), and
torch.autograd.graph.saved_tensors_hooks records every saved storage once (parameters and the
16-bit copies of weights excepted: the estimator's "weights" term). The torch-autocast
activation terms of the estimator (estimator/autocast_activations.h) were written from these
lists.

  PYTHONPATH=hooks/python FRAGSCOPE_LIB_DIR=build/hooks \\
    python3 scripts/estimator/saved_tensors_probe.py CONFIG.json [--seq 2048] [--attention sdpa]

Prints, for the last decoder layer and for what is outside the layers, each saved tensor's
bytes, shape and dtype (largest first) and the totals in units of s b h bytes.
"""
import argparse
import os
import sys
import tempfile


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument("--attention", default="sdpa")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from fragscope.predictor.capture import capture
    from fragscope.predictor.hf_loop import load_config

    cfg = load_config(args.config, None)
    with tempfile.TemporaryDirectory() as tmp, \
            capture(os.path.join(tmp, "probe.fslog"), gpu="h100-80gb") as (_, mark):
        mark("init / weights")
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation=args.attention)
        model.train()
        # The decoder layers: the model's first ModuleList in every type probed.
        layers = next(m for m in model.modules() if isinstance(m, torch.nn.ModuleList))
        where = {"block": "outside"}
        for i, layer in enumerate(layers):
            layer.register_forward_pre_hook(lambda m, a, i=i: where.update(block=i))
            layer.register_forward_hook(lambda m, a, o: where.update(block="outside"))
        params = {p.untyped_storage()._cdata for p in model.parameters()}
        shapes = {tuple(p.shape) for p in model.parameters()}
        saved = {}

        def pack(t):
            st = t.untyped_storage()
            key = st._cdata
            if key not in saved and key not in params:
                weight_copy = (t.dtype != torch.float32
                               and (tuple(t.shape) in shapes or tuple(t.shape)[::-1] in shapes)
                               and t.dim() >= 2 and t.shape[0] != args.micro_batch)
                # The storage is kept (it is saved anyway): a freed temporary's StorageImpl
                # address, the key, could otherwise come back for a new storage and hide it.
                saved[key] = (where["block"], st.nbytes(), tuple(t.shape), str(t.dtype),
                              weight_copy, st)
            return t

        ids = torch.randint(0, cfg.vocab_size, (args.micro_batch, args.seq), device="cuda")
        mark("step 0 / forward")
        m0 = torch.cuda.memory_allocated()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
        m1 = torch.cuda.memory_allocated()
        sbh = args.seq * args.micro_batch * cfg.hidden_size
        last = len(layers) - 1
        for block in (last, "outside"):
            rows = sorted((v for v in saved.values() if v[0] == block), key=lambda v: -v[1])
            act = sum(v[1] for v in rows if not v[4])
            copies = sum(v[1] for v in rows if v[4])
            print(f"== {'layer ' + str(block) if block != 'outside' else 'outside the layers'}: "
                  f"{act:,} B = {act / sbh:.4f} s b h (weight copies {copies:,} B)")
            for _, nbytes, shape, dtype, copy, _ in rows:
                print(f"  {nbytes:>14,}  {nbytes / sbh:8.4f} sbh  {str(list(shape)):28} {dtype}"
                      f"{'  (weight copy)' if copy else ''}")
        print(f"allocated after the forward - before: {m1 - m0:,} B")
        del loss
    return 0


if __name__ == "__main__":
    sys.exit(main())
