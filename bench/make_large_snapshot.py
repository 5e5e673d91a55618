#!/usr/bin/env python3
"""Writes a large PyTorch memory snapshot pickle, streamed (no GPU, no torch, constant memory).

  make_large_snapshot.py OUT.pickle ENTRIES [--stack-depth D] [--check]

The file is what torch.cuda.memory._dump_snapshot() of PyTorch 2.11 writes with Python's default
pickle protocol (4 on Python 3.8-3.13): FRAMEs of about 64 KiB, every str and container
memoized (MEMOIZE), repeats as BINGET / LONG_BINGET, ints as BININT1 / BININT2 / BININT / LONG1,
containers filled with MARK ... APPENDS / SETITEMS in batches of 1000. One device's trace of
ENTRIES entries (rounded up to a whole round): every entry carries 'action', 'addr', 'size', 'stream', 'compile_context',
'user_metadata' (2.11 writes both on every entry), 'frames' and 'time_us'. Each entry's frames
list is a list of its own (2.11 symbolizes one traceback per entry) of D frames (default 30)
drawn from 4096 shared frame dicts, as _snapshot() shares them. At the default depth an entry
takes ~200 bytes: 10.5 M entries make ~2.1 GB.

The trace replays as PyTorch's allocator made it: one 2 MiB small-pool segment; rounds of 1-16
allocations of 512 B - 64 KiB (multiples of 512, so PyTorch does not round them) carved from the
segment's start, then all freed in random order (free_requested, free_completed), so that
`fragscope verify` finds it faithful. user_metadata changes every 100 000 entries ("step N").

--check builds the same snapshot as Python objects, for small ENTRIES, and asserts that
pickle.loads of the written file equals it.
"""
import argparse
import pickle
import random
import struct
import sys

FRAME_TARGET = 64 * 1024
SEGMENT = 0x7F00_0000_0000
SMALL_SEGMENT_BYTES = 2 << 20
T0 = 1_750_000_000_000_000
FRAME_POOL = 4096
METADATA_PERIOD = 100_000


class Writer:
    """Opcodes into ~64 KiB FRAMEs, flushed only between whole opcodes; a Python-like memo."""

    def __init__(self, out):
        self.out = out
        self.buf = bytearray()
        self.memo_size = 0
        self.strings = {}  # str -> memo index
        out.write(b'\x80\x04')  # PROTO 4

    def flush(self, force=False):
        if self.buf and (force or len(self.buf) >= FRAME_TARGET):
            self.out.write(b'\x95' + struct.pack('<Q', len(self.buf)))
            self.out.write(self.buf)
            self.buf = bytearray()

    def op(self, data):
        self.buf += data

    def memoize(self):
        self.buf += b'\x94'
        self.memo_size += 1
        return self.memo_size - 1

    def get(self, index):
        self.buf += (b'h' + bytes([index])) if index < 256 else (b'j' + struct.pack('<I', index))

    def string(self, s):
        if s in self.strings:
            self.get(self.strings[s])
            return
        data = s.encode('utf-8')
        assert len(data) < 256
        self.buf += b'\x8c' + bytes([len(data)]) + data
        self.strings[s] = self.memoize()

    def int(self, v):
        self.buf += encode_int(v)


def encode_int(v):
    if 0 <= v <= 0xFF:
        return b'K' + bytes([v])
    if 0 <= v <= 0xFFFF:
        return b'M' + struct.pack('<H', v)
    if -0x80000000 <= v <= 0x7FFFFFFF:
        return b'J' + struct.pack('<i', v)
    n = (v.bit_length() + 8) // 8  # pickle.encode_long: two's complement, little endian
    data = v.to_bytes(n, 'little', signed=True)
    if v < 0 and n > 1 and data[-1] == 0xFF and (data[-2] & 0x80):
        data = data[:-1]
    return b'\x8a' + bytes([len(data)]) + data


def workload(entries, seed=1):
    """(action, addr, size) of each entry: whole rounds, at least `entries` entries."""
    rng = random.Random(seed)
    n = 0
    yield ('segment_alloc', SEGMENT, SMALL_SEGMENT_BYTES)
    n += 1
    while n < entries:
        sizes = [512 * rng.randint(1, 128) for _ in range(rng.randint(1, 16))]
        offset = 0
        blocks = []
        for size in sizes:
            blocks.append((SEGMENT + offset, size))
            offset += size
        for addr, size in blocks:
            yield ('alloc', addr, size)
        rng.shuffle(blocks)
        for addr, size in blocks:
            yield ('free_requested', addr, size)
            yield ('free_completed', addr, size)
        n += 3 * len(blocks)


def metadata_of(i):
    return '' if i < METADATA_PERIOD else 'step %d' % (i // METADATA_PERIOD)


def write(path, entries, depth):
    rng = random.Random(2)
    with open(path, 'wb', buffering=1 << 20) as out:
        w = Writer(out)
        w.op(b'}')  # the snapshot dict
        w.memoize()
        w.op(b'(')
        # Frames: 4096 shared frame dicts, inside the one segment's frames list (where 2.11's
        # symbolize() would first write them); later lists reference them by memo index.
        w.string('segments')
        w.op(b']')
        w.memoize()
        w.op(b'}')  # the segment
        w.memoize()
        w.op(b'(')
        for key, value in (('device', 0), ('address', SEGMENT), ('total_size', SMALL_SEGMENT_BYTES),
                           ('allocated_size', 0), ('active_size', 0), ('requested_size', 0),
                           ('stream', 0)):
            w.string(key)
            w.int(value)
        w.string('segment_type')
        w.string('small')
        w.string('segment_pool_id')
        w.op(b'K\x00K\x00\x86')  # (0, 0): TUPLE2
        w.memoize()
        w.string('is_expandable')
        w.op(b'\x89')  # False
        w.string('frames')
        w.op(b']')
        w.memoize()
        frame_ids = []
        for start in range(0, FRAME_POOL, 1000):
            w.op(b'(')
            for f in range(start, min(start + 1000, FRAME_POOL)):
                w.op(b'}')
                frame_ids.append(w.memoize())
                w.op(b'(')
                w.string('filename')
                w.string('/models/layer_%d.py' % (f % 97))
                w.string('line')
                w.int(f)
                w.string('name')
                w.string('forward_%d' % (f % 13))
                w.op(b'u')
            w.op(b'e')
            w.flush()
        w.string('blocks')
        w.op(b']')
        w.memoize()
        w.op(b'}')  # one inactive block, the whole segment
        w.memoize()
        w.op(b'(')
        w.string('address')
        w.int(SEGMENT)
        w.string('size')
        w.int(SMALL_SEGMENT_BYTES)
        w.string('requested_size')
        w.int(0)
        w.string('state')
        w.string('inactive')
        w.string('frames')
        w.op(b']')
        w.memoize()
        w.op(b'u')
        w.op(b'a')  # APPEND the block
        w.op(b'u')  # the segment's SETITEMS
        w.op(b'a')  # APPEND the segment

        w.string('device_traces')
        w.op(b']')
        w.memoize()
        w.op(b']')  # device 0's trace
        w.memoize()
        # Precomputed frames-list bodies (each written as a new list, as 2.11 writes them).
        stacks = []
        for _ in range(256):
            body = bytearray(b'(')
            for f in rng.sample(frame_ids, depth):
                body += b'j' + struct.pack('<I', f) if f >= 256 else b'h' + bytes([f])
            body += b'e'
            stacks.append(bytes(body))
        in_batch = 0
        i = 0
        for action, addr, size in workload(entries):
            if in_batch == 0:
                w.op(b'(')
            w.op(b'}')
            w.memoize()
            w.op(b'(')
            w.string('action')
            w.string(action)
            w.string('addr')
            w.int(addr)
            w.string('size')
            w.int(size)
            w.string('stream')
            w.int(0)
            w.string('compile_context')
            w.string('N/A')
            w.string('user_metadata')
            w.string(metadata_of(i))
            w.string('frames')
            w.op(b']')
            w.memoize()
            w.op(stacks[i & 255])
            w.string('time_us')
            w.int(T0 + i)
            w.op(b'u')
            i += 1
            in_batch += 1
            if in_batch == 1000:
                w.op(b'e')
                in_batch = 0
            w.flush()
        if in_batch:
            w.op(b'e')
        w.op(b'a')  # APPEND device 0's trace to device_traces
        w.string('allocator_settings')
        w.op(b'}')
        w.memoize()
        w.op(b'(')
        w.string('PYTORCH_CUDA_ALLOC_CONF')
        w.string('')
        w.string('max_split_size')
        w.int(-1)
        w.string('expandable_segments')
        w.op(b'\x89')
        w.op(b'u')
        w.string('external_annotations')
        w.op(b']')
        w.memoize()
        w.op(b'u')  # the snapshot dict's SETITEMS
        w.op(b'.')
        w.flush(force=True)
    return i


def expected(entries, depth):
    """The same snapshot as Python objects (for --check)."""
    rng = random.Random(2)
    frames = [{'filename': '/models/layer_%d.py' % (f % 97), 'line': f,
               'name': 'forward_%d' % (f % 13)} for f in range(FRAME_POOL)]
    # Stack bodies pick frame memo ids; map them back to positions in the pool.
    stacks = [rng.sample(range(FRAME_POOL), depth) for _ in range(256)]
    trace = []
    for i, (action, addr, size) in enumerate(workload(entries)):
        trace.append({'action': action, 'addr': addr, 'size': size, 'stream': 0,
                      'compile_context': 'N/A', 'user_metadata': metadata_of(i),
                      'frames': [frames[f] for f in stacks[i & 255]], 'time_us': T0 + i})
    segment = {'device': 0, 'address': SEGMENT, 'total_size': SMALL_SEGMENT_BYTES,
               'allocated_size': 0, 'active_size': 0, 'requested_size': 0, 'stream': 0,
               'segment_type': 'small', 'segment_pool_id': (0, 0), 'is_expandable': False,
               'frames': frames,
               'blocks': [{'address': SEGMENT, 'size': SMALL_SEGMENT_BYTES, 'requested_size': 0,
                           'state': 'inactive', 'frames': []}]}
    return {'segments': [segment], 'device_traces': [trace],
            'allocator_settings': {'PYTORCH_CUDA_ALLOC_CONF': '', 'max_split_size': -1,
                                   'expandable_segments': False},
            'external_annotations': []}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('out')
    parser.add_argument('entries', type=int)
    parser.add_argument('--stack-depth', type=int, default=30)
    parser.add_argument('--check', action='store_true')
    args = parser.parse_args()
    if args.entries < 1 or not 1 <= args.stack_depth <= FRAME_POOL:
        sys.exit('ENTRIES must be >= 1 and --stack-depth in 1..%d' % FRAME_POOL)
    n = write(args.out, args.entries, args.stack_depth)
    if args.check:
        with open(args.out, 'rb') as f:
            got = pickle.load(f)
        want = expected(n, args.stack_depth)
        assert got == want, 'the written pickle does not decode to the expected snapshot'
        print('check: pickle.load equals the expected snapshot (%d entries)' % n)


if __name__ == '__main__':
    main()
