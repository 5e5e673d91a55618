#!/usr/bin/env python3
"""Checks fragscope's pickle writer against Python's own unpickler.

    mkdir -p /tmp/pw
    FRAGSCOPE_PICKLE_WRITER_OUT=/tmp/pw build/tests/analysis/importers_test \\
        --gtest_filter=PickleWriterTest.WritesFilesForPythonVerification
    python3 tests/data/pickle/verify_writer.py /tmp/pw

For every NAME.pN.pickle the test wrote, pickle.load must succeed, pickletools must find a
well-formed opcode stream of protocol N, and repr() of the loaded object must equal NAME.repr.txt,
which holds the C++ DebugString of the value that was written. Prints one line per file; exits 1
on any mismatch.
"""
import glob
import io
import os
import pickle
import pickletools
import sys


def main(directory):
    failures = 0
    files = sorted(glob.glob(os.path.join(directory, '*.p[2-5].pickle')))
    if not files:
        print(f'no *.pN.pickle files in {directory}')
        return 1
    for path in files:
        name, proto = os.path.basename(path).rsplit('.', 2)[:2]
        with open(path, 'rb') as f:
            data = f.read()
        expected = open(os.path.join(directory, name + '.repr.txt'), encoding='utf-8').read()
        try:
            obj = pickle.loads(data)
            pickletools.dis(data, out=io.StringIO())  # raises on a malformed stream
            ok = repr(obj) == expected and data[1] == int(proto[1:])
        except Exception as e:  # noqa: BLE001 - report any failure
            print(f'FAIL {path}: {e}')
            failures += 1
            continue
        print(f'{"ok  " if ok else "FAIL"} {path} ({len(data)} bytes)')
        failures += not ok
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else '.'))
