"""Context parallelism in fragscope.predict: torch's context_parallel
(torch.distributed.tensor.experimental) over the "cp" dimension of a ("dp", "cp") mesh, cp
innermost, as torchtitan applies it (torchtitan/distributed/utils.py, create_context_parallel_ctx;
FSDP2 over "dp" and "cp" flattened: a parameter is sharded over the whole world).

Each training step's forward and backward run inside context_parallel(cp mesh, buffers=[the
token ids], buffer_seq_dims=[1]): the batch's ids (made whole on the device, as a data loader
hands them) are sharded in place along the sequence with torch's head-tail load balancer (each
rank holds two chunks of seq / (2 x cp) positions), so that the rank's hidden states, saved
activations and logits are its seq / cp positions; torch.nn.functional.scaled_dot_product_attention
runs as torch's ring attention: the queries stay local, the keys and values are gathered from the
group (the default rotate method, one all_gather_tensor per attention call: the ring's buffer,
with the communication role, collectives.py) and each step's partial outputs merged in fp32.

One difference that changes no allocation: torchtitan shards its rotary table along with the ids;
a transformers model computes its rotary embedding from position ids, which are the local ones
(0 .. seq / cp - 1) here: the true positions of the rank's two chunks would read to
transformers as packed sequences (a position jump) and make an attention mask, which torch's ring
attention does not take. The labels are the sharded ids, shifted within the rank's part by the
model's loss (one position per shard boundary off: the same shapes).

Refused: attention other than SDPA (the ring replaces SDPA only), a sequence that 2 x cp does not
divide (the load balancer's chunks).
"""

import contextlib

from .errors import PredictionError


def check(cp, seq):
    """ValueError when the sequence cannot be split over cp ranks by the head-tail balancer."""
    if seq % (2 * cp):
        raise ValueError(f"seq {seq} is not a multiple of 2 x cp {cp}: context parallelism's "
                         "load balancer splits the sequence into 2 x cp chunks")


def check_attention(used, cp):
    """PredictionError unless the model's attention is SDPA (`used`: attention.used)."""
    if used != "sdpa":
        raise PredictionError(f"--cp {cp} needs SDPA attention (torch's ring attention "
                              f"replaces scaled_dot_product_attention); the model runs {used}")


@contextlib.contextmanager
def sequence_sharded(cp_mesh, ids):
    """Inside: `ids` (batch x seq, on the device) is the rank's seq / cp positions of it, and SDPA
    is torch's ring attention over `cp_mesh`."""
    from torch.distributed.tensor.experimental import context_parallel

    with context_parallel(cp_mesh, buffers=[ids], buffer_seq_dims=[1],
                          no_restore_buffers={ids}):
        yield
