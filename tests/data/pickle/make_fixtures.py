#!/usr/bin/env python3
"""Regenerates the pickle fixtures of tests/analysis/pickle_test.cc and pytorch_snapshot_test.cc.

    python3 tests/data/pickle/make_fixtures.py      # writes next to this script

For each fixture NAME it writes NAME.pN.pickle (pickle.dumps with protocol N, as
torch.cuda.memory._dump_snapshot does with Python's default protocol) and NAME.repr.txt
(repr() of the object, which the C++ DebugString must reproduce). bad_*.pickle are inputs the
reader must reject. snapshot_jit.p2.pickle imitates LibTorch's jit Pickler
(torch::cuda::_memory_snapshot_pickled): PROTO 2, BINUNICODE strings memoized with BINPUT and
reused with BINGET, LONG1 with 8 bytes, containers memoized after they are filled.

Only the standard library is used; no torch. The output is deterministic.
"""
import os
import pickle
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def snapshot():
    """A dict shaped like torch.cuda.memory._snapshot() of PyTorch 2.5 (two devices)."""
    # Frames are shared the way PyTorch's symbolize() shares them: one dict per distinct frame,
    # one list per distinct stack, referenced from every entry with that stack.
    f_train = {'filename': '/data/train.py', 'line': 42, 'name': 'step'}
    f_linear = {'filename': '/usr/lib/python3/site-packages/torch/nn/modules/linear.py',
                'line': 125, 'name': 'forward'}
    f_empty = {'filename': '??', 'line': 0, 'name': 'at::native::empty_cuda'}
    stack_a = [f_empty, f_linear, f_train]
    stack_b = [f_train]
    no_frames = []
    seg0 = 0x7f3a_0000_0000
    segments = [
        {'device': 0, 'address': seg0, 'total_size': 20971520, 'allocated_size': 8388608,
         'active_size': 12582912, 'requested_size': 12000000, 'stream': 0,
         'segment_type': 'large', 'segment_pool_id': (0, 0), 'is_expandable': False,
         'frames': stack_a,
         'blocks': [
             {'address': seg0, 'size': 8388608, 'requested_size': 8000000,
              'state': 'active_allocated', 'frames': stack_a},
             {'address': seg0 + 8388608, 'size': 4194304, 'requested_size': 4000000,
              'state': 'active_pending_free', 'frames': stack_b},
             {'address': seg0 + 12582912, 'size': 8388608, 'requested_size': 0,
              'state': 'inactive', 'frames': no_frames},
         ]},
        {'device': 1, 'address': 0x7f3b_0020_0000, 'total_size': 2097152, 'allocated_size': 512,
         'active_size': 512, 'requested_size': 500, 'stream': 94_250_000_000_000,
         'segment_type': 'small', 'segment_pool_id': (1, 7), 'is_expandable': True,
         'frames': no_frames,
         'blocks': [
             {'address': 0x7f3b_0020_0000, 'size': 512, 'requested_size': 500,
              'state': 'active_allocated', 'frames': stack_b},
             {'address': 0x7f3b_0020_0200, 'size': 2096640, 'requested_size': 0,
              'state': 'inactive', 'frames': no_frames},
         ]},
    ]
    t0 = 1_700_000_000_000_000
    trace0 = [
        {'action': 'segment_alloc', 'addr': seg0, 'size': 20971520, 'stream': 0,
         'time_us': t0, 'frames': stack_a},
        {'action': 'alloc', 'addr': seg0, 'size': 8000000, 'stream': 0, 'time_us': t0 + 1,
         'compile_context': 'N/A', 'user_metadata': '', 'frames': stack_a},
        {'action': 'alloc', 'addr': seg0 + 8388608, 'size': 4000000, 'stream': 0,
         'time_us': t0 + 2, 'frames': stack_b},
        {'action': 'free_requested', 'addr': seg0 + 8388608, 'size': 4000000, 'stream': 0,
         'time_us': t0 + 3, 'frames': stack_b},
        {'action': 'segment_map', 'addr': seg0 + 20971520, 'size': 2097152, 'stream': 0,
         'time_us': t0 + 4, 'frames': no_frames},
        {'action': 'segment_unmap', 'addr': seg0 + 20971520, 'size': 2097152, 'stream': 0,
         'time_us': t0 + 5, 'frames': no_frames},
        {'action': 'oom', 'device_free': 1048576, 'size': 1073741824, 'stream': 0,
         'time_us': t0 + 6, 'frames': stack_b},
        {'action': 'snapshot', 'addr': 0, 'size': 12000000, 'stream': 0, 'time_us': t0 + 7},
    ]
    trace1 = [
        {'action': 'alloc', 'addr': 0x7f3b_0020_0000, 'size': 500, 'stream': 94_250_000_000_000,
         'time_us': t0 + 10, 'frames': stack_b, 'pool_id': (1, 7)},
        {'action': 'free_completed', 'addr': 0x7f3b_0020_0400, 'size': 100,
         'stream': 94_250_000_000_000, 'time_us': t0 + 11, 'frames': stack_b},
        {'action': 'segment_free', 'addr': 0x7f3c_0000_0000, 'size': 2097152, 'stream': 0,
         'time_us': t0 + 12, 'frames': no_frames},
        {'action': 'future_action', 'addr': 16, 'size': 0, 'stream': 0, 'time_us': t0 + 13},
    ]
    settings = {
        'PYTORCH_CUDA_ALLOC_CONF': 'max_split_size_mb:128,roundup_power2_divisions:4',
        'max_split_size': 134217728,
        'garbage_collection_threshold': 0.8,
        'expandable_segments': False,
        'pinned_num_register_threads': 1,
        'release_lock_on_cudamalloc': False,
        'pinned_use_cuda_host_register': False,
        'roundup_power2_divisions': {str(1 << i): (4 if i < 3 else 0) for i in range(16)},
    }
    annotations = [{'name': 'forward', 'stage': 'START', 'device': 0, 'time_us': t0},
                   {'name': 'forward', 'stage': 'END', 'device': 0, 'time_us': t0 + 9}]
    return {'segments': segments, 'device_traces': [trace0, trace1],
            'allocator_settings': settings, 'external_annotations': annotations}


def snapshot_211():
    """A dict shaped as PyTorch 2.11's _snapshot() writes it, with two devices' traces.

    Every trace entry carries 'compile_context' and 'user_metadata' (2.11's Module.cpp always
    writes both: "N/A" and "" when unset); device 0 sets user metadata and enters a compiled
    region, has an 'annotate' entry (newer releases' action) and an OOM; device 1 maps and unmaps
    expandable-segment pages. Both traces replay as PyTorch's allocator made them.
    """
    frame = {'filename': '/data/train.py', 'line': 7, 'name': 'step'}
    stack = [frame]
    mib = 1 << 20
    a = 0x7f00_0000_0000  # device 0: one 20 MiB segment
    b = 0x7f10_0000_0000  # device 1: an expandable segment, one 2 MiB small page
    t0 = 1_750_000_000_000_000

    def entry(action, addr, size, t, metadata='', compiled='N/A', stream=0):
        key = 'device_free' if action == 'oom' else 'addr'
        return {'action': action, key: addr, 'size': size, 'stream': stream,
                'compile_context': compiled, 'user_metadata': metadata, 'frames': stack,
                'time_us': t0 + t}

    trace0 = [
        entry('segment_alloc', a, 20 * mib, 0),
        entry('alloc', a, 8 * mib, 1),
        entry('alloc', a + 8 * mib, 4 * mib, 2, metadata='stage 2'),
        entry('free_requested', a + 8 * mib, 4 * mib, 3, metadata='stage 2',
              compiled='Torch-Compiled Region: 0/1'),
        entry('free_completed', a + 8 * mib, 4 * mib, 4, metadata='stage 2',
              compiled='Torch-Compiled Region: 0/1'),
        entry('annotate', 0, 0, 5, metadata='checkpoint'),
        entry('oom', mib, 1 << 30, 6, metadata='stage 3'),
    ]
    trace1 = [
        entry('segment_map', b, 2 * mib, 10),
        entry('alloc', b, 512, 11),
        entry('free_requested', b, 512, 12),
        entry('free_completed', b, 512, 13),
        entry('segment_unmap', b, 2 * mib, 14),
    ]
    segments = [
        {'device': 0, 'address': a, 'total_size': 20 * mib, 'allocated_size': 8 * mib,
         'active_size': 8 * mib, 'requested_size': 8 * mib, 'stream': 0,
         'segment_type': 'large', 'segment_pool_id': (0, 0), 'is_expandable': False,
         'frames': stack,
         'blocks': [
             {'address': a, 'size': 8 * mib, 'requested_size': 8 * mib,
              'state': 'active_allocated', 'frames': stack},
             {'address': a + 8 * mib, 'size': 12 * mib, 'requested_size': 0,
              'state': 'inactive', 'frames': []},
         ]},
    ]
    settings = {'PYTORCH_CUDA_ALLOC_CONF': '', 'max_split_size': -1,
                'garbage_collection_threshold': 0.0, 'expandable_segments': False,
                'pinned_num_register_threads': 1, 'release_lock_on_cudamalloc': False,
                'pinned_use_cuda_host_register': False,
                'graph_capture_record_stream_reuse': False,
                'roundup_power2_divisions': {str(1 << i): 0 for i in range(16)}}
    annotations = [{'name': 'forward', 'stage': 'START', 'device': 0, 'time_us': t0 + 1},
                   {'name': 'forward', 'stage': 'END', 'device': 0, 'time_us': t0 + 4}]
    return {'segments': segments, 'device_traces': [trace0, trace1],
            'allocator_settings': settings, 'external_annotations': annotations}


def out_of_band():
    """A protocol 5 pickle whose buffer went to a buffer_callback (NEXT_BUFFER, READONLY_BUFFER)."""
    buffers = []
    data = pickle.dumps({'segments': [], 'x': pickle.PickleBuffer(b'abc')}, protocol=5,
                        buffer_callback=buffers.append)
    assert len(buffers) == 1
    return data


def scalars():
    """Every scalar the reader decodes, at each encoding boundary."""
    ints = [0, 1, 255, 256, 65535, 65536, -1, -256, 2**31 - 1, 2**31, -2**31, -2**31 - 1,
            2**32, 2**47 + 5, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**100, -(2**100)]
    floats = [0.0, -0.0, 1.5, -2.25, 0.1, 1e-05, 0.0001, 1e16, 1234567890123456.0, 1e300,
              5e-324, float('inf'), float('-inf'), 123456789.123]
    strs = ['', 'a', "it's", 'say "hi"', 'tab\there\nnl', 'µs→', 'x' * 300, '\x00\x7f']
    return {'none': None, 'true': True, 'false': False, 'ints': ints, 'floats': floats,
            'strs': strs, 'tuples': [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)],
            'int_keys': {1: 'one', -1: 'minus one', 2**40: 'big'},
            'nested': [[[[]]], {'a': {'b': {'c': []}}}]}


def bytes_values():
    return {'empty': b'', 'bin': b'\x00\xff\x7f', 'long': b'y' * 300}


def batches():
    """Lists and dicts longer than the pickler's batch size of 1000."""
    return {'list': list(range(1500)), 'dict': {f'k{i}': i for i in range(1001)}}


def large():
    """More than 64 KiB, so protocol 4 splits it into several FRAMEs."""
    return [f'{i:04d}' + 'z' * 96 for i in range(700)]


def jit_pickle(obj):
    """Encodes like torch::jit::Pickler with tag_aggregates=false (memory_snapshot.cpp)."""
    out = bytearray(b'\x80\x02')
    next_memo = [0]
    strings = {}

    def put():
        idx = next_memo[0]
        next_memo[0] += 1
        if idx < 256:
            out.extend(b'q' + bytes([idx]))
        else:
            out.extend(b'r' + struct.pack('<I', idx))
        return idx

    def get(idx):
        out.extend(b'h' + bytes([idx]) if idx < 256 else b'j' + struct.pack('<I', idx))

    shared = {}

    def push(v):
        if isinstance(v, bool):
            out.extend(b'\x88' if v else b'\x89')
        elif isinstance(v, int):
            if 0 <= v <= 0xff:
                out.extend(b'K' + bytes([v]))
            elif 0 <= v <= 0xffff:
                out.extend(b'M' + struct.pack('<H', v))
            elif -2**31 <= v < 2**31:
                out.extend(b'J' + struct.pack('<i', v))
            else:
                out.extend(b'\x8a\x08' + struct.pack('<q', v))
        elif isinstance(v, float):
            out.extend(b'G' + struct.pack('>d', v))
        elif isinstance(v, str):
            if v in strings:
                get(strings[v])
            else:
                data = v.encode('utf-8')
                out.extend(b'X' + struct.pack('<I', len(data)) + data)
                strings[v] = put()
        elif isinstance(v, tuple):
            for item in v:
                push(item)
            out.extend({1: b'\x85', 2: b'\x86', 3: b'\x87'}[len(v)])
        elif isinstance(v, (list, dict)):
            if id(v) in shared:
                get(shared[id(v)])
                return
            if isinstance(v, list):
                out.extend(b'](')
                for item in v:
                    push(item)
                out.extend(b'e')
            else:
                out.extend(b'}(')
                for k, item in v.items():
                    push(k)
                    push(item)
                out.extend(b'u')
            if refcount.get(id(v), 0) > 1:
                shared[id(v)] = put()
        else:
            raise TypeError(type(v))

    refcount = {}

    def count(v):
        if isinstance(v, (list, dict)):
            refcount[id(v)] = refcount.get(id(v), 0) + 1
            if refcount[id(v)] > 1:
                return
            for item in (v if isinstance(v, list) else list(v.keys()) + list(v.values())):
                count(item)
        elif isinstance(v, tuple):
            for item in v:
                count(item)

    count(obj)
    push(obj)
    out.extend(b'.')
    return bytes(out)


def write(name, data):
    with open(os.path.join(HERE, name), 'wb') as f:
        f.write(data)


def fixture(name, obj, protocols, with_repr=True):
    for p in protocols:
        data = pickle.dumps(obj, protocol=p)
        assert pickle.loads(data) == obj
        write(f'{name}.p{p}.pickle', data)
    if with_repr:
        write(f'{name}.repr.txt', repr(obj).encode('utf-8'))


def main():
    fixture('snapshot', snapshot(), [2, 3, 4, 5])
    fixture('snapshot_211', snapshot_211(), [5], with_repr=False)
    fixture('scalars', scalars(), [2, 3, 4, 5])
    fixture('bytes', bytes_values(), [3, 4, 5])
    fixture('batches', batches(), [2, 4], with_repr=False)  # the test rebuilds the values
    fixture('large', large(), [4], with_repr=False)
    jit = jit_pickle(snapshot())
    assert pickle.loads(jit) == snapshot()
    write('snapshot_jit.p2.pickle', jit)
    # Inputs the reader must reject.
    write('bad_bytes_global.p2.pickle', pickle.dumps(b'\x01\x02', protocol=2))  # GLOBAL _codecs
    write('bad_protocol0.pickle', pickle.dumps({'a': 1}, protocol=0))
    cyclic = []
    cyclic.append(cyclic)
    write('bad_cyclic.p4.pickle', pickle.dumps(cyclic, protocol=4))
    write('bad_set.p4.pickle', pickle.dumps({1, 2}, protocol=4))
    write('bad_object.p4.pickle', pickle.dumps(range(3), protocol=4))
    write('bad_out_of_band.p5.pickle', out_of_band())
    return 0


if __name__ == '__main__':
    sys.exit(main())
