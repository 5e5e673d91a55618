"""fragscope.name_modules() in a real job's process (module_context.py), through the real
allocator library on a simulated device, with torch on a CPU: allocations made in a module's
forward name that module; those made in backward name the module whose forward made the running
autograd node, in backward; none after it ends or outside every module. fragscope.name_roles():
the parameters, their gradients and the optimizer's states tagged by identity with their module.

Run by ctest with FRAGSCOPE_LIB_DIR, FRAGSCOPE_SIMULATED_DEVICE_BYTES and FRAGSCOPE_BIN set.
The model's tensors are CPU tensors; its "CUDA allocations" are the library's own fragscope_malloc,
called where the job's would be made.
"""
import os
import re
import subprocess
import tempfile
import unittest

try:
    import torch
except ImportError:
    torch = None

import fragscope

MIB = 1 << 20


@unittest.skipIf(torch is None, "torch is not installed")
class ModuleContextTest(unittest.TestCase):
    def test_forward_and_backward_allocations_name_their_module(self):
        lib = fragscope._load(fragscope._ALLOC)
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "job.%d.fslog")
            fragscope.pool_allocator(log=log)

            class Grows(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    return x * 2

                @staticmethod
                def backward(ctx, grad):
                    lib.fragscope_malloc(2 * MIB, 0, None)  # a gradient's memory
                    return grad * 2

            class Leaf(torch.nn.Module):
                def forward(self, x):
                    lib.fragscope_malloc(MIB, 0, None)  # an activation's memory
                    return Grows.apply(x)

            class Net(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.first = Leaf()
                    self.second = Leaf()

                def forward(self, x):
                    return self.second(self.first(x))

            net = Net()
            with fragscope.name_modules(sites=True):
                loss = net(torch.ones(4, requires_grad=True)).sum()
                loss.backward()
                lib.fragscope_malloc(3 * MIB, 0, None)  # after the backward: no module
            lib.fragscope_malloc(4 * MIB, 0, None)  # after name_modules: none
            fragscope.flush()
            path = log.replace("%d", "0")
            dump = subprocess.run([os.environ["FRAGSCOPE_BIN"], "dump", path], check=True,
                                  capture_output=True, text=True).stdout
        strings = dict(re.findall(r"string +id=(\d+) '([^']*)'", dump))
        contexts, sites = {}, {}
        for cid, module, site, backward in re.findall(
                r"context +id=(\d+) role=unknown module=(\d+) op=0 site=(\d+)( backward)?", dump):
            contexts[cid] = (strings.get(module, ""), bool(backward))
            sites[cid] = strings.get(site, "")
        allocs = []
        for line in dump.splitlines():
            alloc = re.match(r"#\d+ \S+ alloc +ptr=\S+ size=(\S+ \S+) ", line)
            if alloc:
                named = re.search(r" context=(\d+)", line)
                allocs.append((alloc.group(1), contexts[named.group(1)] if named else None))
                if named:  # the code that called the module: Net.forward's line (sites=True)
                    self.assertRegex(sites[named.group(1)],
                                     r"^python_module_context_test\.py:\d+ in forward$")
        self.assertEqual(allocs, [
            ("1024.00 KiB", ("first", False)),
            ("1024.00 KiB", ("second", False)),
            ("2.00 MiB", ("second", True)),
            ("2.00 MiB", ("first", True)),
            ("3.00 MiB", None),
            ("4.00 MiB", None),
        ], dump)

    def test_roles_by_identity_name_the_parameters_module(self):
        from fragscope.module_context import name_roles

        class Tags:
            def __init__(self):
                self.seen = []

            def tag(self, ptr, device, role, module):
                self.seen.append((ptr, role, module))

        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
        optimizer = torch.optim.AdamW(model.parameters())
        tags = Tags()
        handle = name_roles(model, optimizer, libraries=tags, device_type="cpu")
        ptr = {id(p): p.untyped_storage().data_ptr() for p in model.parameters()}
        weights = [(ptr[id(p)], 1, name.rpartition(".")[0]) for name, p in model.named_parameters()]
        self.assertEqual(tags.seen, weights)
        model(torch.ones(3, 4)).sum().backward()
        grads = {(p.grad.untyped_storage().data_ptr(), 2) for p in model.parameters()}
        self.assertEqual({(t[0], t[1]) for t in tags.seen[4:]}, grads)
        self.assertEqual({t[2] for t in tags.seen[4:]}, {"0", "1"})
        del tags.seen[:]
        optimizer.step()
        # exp_avg, exp_avg_sq and step of each of the 4 parameters (all on the CPU here; on a GPU
        # the step counts stay on the CPU and are not tagged).
        states = [t for t in tags.seen if t[1] == 3]
        self.assertEqual(len(states), 3 * 4, tags.seen)
        self.assertEqual({t[2] for t in states}, {"0", "1"})
        handle.remove()
        del tags.seen[:]
        optimizer.step()
        self.assertEqual(tags.seen, [])


if __name__ == "__main__":
    unittest.main()
