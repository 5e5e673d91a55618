"""fragscope.name_modules() in a real job's process (module_context.py), through the real
allocator library on a simulated device, with torch on a CPU: allocations made in a module's
forward name that module; those made in backward name the module whose forward made the running
autograd node, in backward; none after it ends or outside every module. fragscope.name_roles():
the parameters, their gradients and the optimizer's states tagged by identity with their module.

Run by ctest twice, with FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set: through the allocator library on
a simulated device (FRAGSCOPE_SIMULATED_DEVICE_BYTES; its "CUDA allocations" are the library's own
fragscope_malloc), and under LD_PRELOAD=libfragscope_preload.so in cache mode over the stub CUDA
runtime (FRAGSCOPE_STUB_CUDART, FRAGSCOPE_LOG; its "CUDA allocations" are cudaMalloc calls, which
the interposer serves). Either way the model's tensors are CPU tensors, and its allocations are
made where the job's would be.
"""
import ctypes
import os
import re
import subprocess
import tempfile
import unittest

if "FRAGSCOPE_STUB_CUDART" in os.environ:
    # Under the interposer: the stub runtime joins the global scope before the libcudart that
    # `import torch` loads there, so that the interposer forwards to the stub (the first after it).
    ctypes.CDLL(os.environ["FRAGSCOPE_STUB_CUDART"], mode=ctypes.RTLD_GLOBAL)

try:
    import torch
except ImportError:
    torch = None

import fragscope

MIB = 1 << 20


def _device_memory(tmp):
    """(malloc(nbytes) -> pointer, the path of device 0's log): the interposer's cudaMalloc over the
    stub runtime when this process runs under it, else fragscope_malloc on a simulated device."""
    if fragscope.preload_mode() is None:
        lib = fragscope._library.load(fragscope._library.ALLOC)
        log = os.path.join(tmp, "job.%d.fslog")
        fragscope.pool_allocator(log=log)
        return (lambda n: lib.fragscope_malloc(n, 0, None)), log.replace("%d", "0")
    cuda_malloc = ctypes.CDLL(None).cudaMalloc  # the interposer's
    cuda_malloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    cuda_malloc.restype = ctypes.c_int

    def malloc(n):
        ptr = ctypes.c_void_p()
        assert cuda_malloc(ctypes.byref(ptr), n) == 0
        return ptr.value

    log = os.environ["FRAGSCOPE_LOG"].replace("%p", str(os.getpid())).replace("%d", "0")
    return malloc, log


@unittest.skipIf(torch is None, "torch is not installed")
class ModuleContextTest(unittest.TestCase):
    def test_forward_and_backward_allocations_name_their_module(self):
        with tempfile.TemporaryDirectory() as tmp:
            malloc, path = _device_memory(tmp)

            class Grows(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    return x * 2

                @staticmethod
                def backward(ctx, grad):
                    malloc(2 * MIB)  # a gradient's memory
                    return grad * 2

            class Leaf(torch.nn.Module):
                def forward(self, x):
                    malloc(MIB)  # an activation's memory
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
                malloc(3 * MIB)  # after the backward: no module
            last = malloc(4 * MIB)  # after name_modules: none
            # A role by identity, with its module (name_roles' call), through the same libraries.
            from fragscope.module_context import _active_libraries
            _active_libraries().tag(last, 0, 1, "second")
            fragscope.flush()
            dump = subprocess.run([os.environ["FRAGSCOPE_BIN"], "dump", path], check=True,
                                  capture_output=True, text=True).stdout
        strings = dict(re.findall(r"string +id=(\d+) '([^']*)'", dump))
        contexts, sites, roles = {}, {}, {}
        for cid, role, module, site, backward in re.findall(
                r"context +id=(\d+) role=(\S+) module=(\d+) op=0 site=(\d+)( backward)?", dump):
            contexts[cid] = (strings.get(module, ""), bool(backward))
            sites[cid] = strings.get(site, "")
            roles[cid] = role
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
        tags = re.findall(r" tag +ptr=0x([0-9a-f]+) role=(\S+) context=(\d+)", dump)
        self.assertEqual([(int(ptr, 16), role, roles[cid], contexts[cid][0])
                          for ptr, role, cid in tags],
                         [(last, "weights", "weights", "second")], dump)

    @unittest.skipIf("FRAGSCOPE_STUB_CUDART" in os.environ,
                     "torch sees the stub's devices, and the optimizer asks the driver about "
                     "them; the plain run checks this")
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


    @unittest.skipIf("FRAGSCOPE_STUB_CUDART" in os.environ, "the plain run checks this")
    def test_a_transformers_kv_cache_is_named(self):
        try:
            from transformers import AutoConfig, AutoModelForCausalLM
        except ImportError:
            self.skipTest("transformers is not installed")
        from fragscope.module_context import name_roles

        class Tags:
            def __init__(self):
                self.seen = []

            def tag(self, ptr, device, role, module):
                self.seen.append((ptr, role))

        cfg = AutoConfig.for_model("llama", hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=64)
        model = AutoModelForCausalLM.from_config(cfg).eval()
        tags = Tags()
        handle = name_roles(model, libraries=tags, device_type="cpu")
        with torch.no_grad():
            out = model(torch.ones(1, 5, dtype=torch.long), use_cache=True)
        # Each layer's keys and values, as the cache holds them after its update.
        held = {t.untyped_storage().data_ptr() for layer in out.past_key_values.layers
                for t in (layer.keys, layer.values)}
        self.assertEqual({ptr for ptr, role in tags.seen if role == 9}, held)
        handle.remove()
        del tags.seen[:]
        with torch.no_grad():
            model(torch.ones(1, 5, dtype=torch.long), use_cache=True)
        self.assertEqual([t for t in tags.seen if t[1] == 9], [])


if __name__ == "__main__":
    unittest.main()
