"""A small, deterministic training loop shared by the Python GPU tests.

As a script (the interposer test runs it in a child process under LD_PRELOAD) it prints one JSON
line: {"losses": [...], "stats": fragscope.stats(), "preload_mode": ...}.
"""
import json
import sys


def cuda_or_skip():
    """Exits 0 with "skipped" unless torch imports and a CUDA device is present."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means "cannot run here"
        print(f"skipped: torch does not import ({e})")
        sys.exit(0)
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        sys.exit(0)
    return torch


def train(torch, steps=20, mark=None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10)).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = torch.randn(steps, 64, 256, generator=torch.Generator().manual_seed(1))
    labels = torch.randint(0, 10, (steps, 64), generator=torch.Generator().manual_seed(2))
    losses = []
    for step in range(steps):
        if mark is not None:
            mark(f"step {step}")
        x, y = data[step].cuda(), labels[step].cuda()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    torch.cuda.synchronize()
    return losses


if __name__ == "__main__":
    torch = cuda_or_skip()
    import fragscope

    losses = train(torch, mark=fragscope.mark)
    fragscope.flush()
    print(json.dumps({"losses": losses, "stats": dict(fragscope.stats(0)),
                      "preload_mode": fragscope.preload_mode()}))
