#!/usr/bin/env python3
"""Converts record_oracle_traces.py's micro_<name>.json into the plain-text files the C++ oracle
test reads (tests/data/oracle/micro_<name>.ops and .stats), so the tests need no JSON parser.

    python3 scripts/gpu/oracle_to_ops.py ORACLE_DIR tests/data/oracle

.ops: '# key value' header lines (conf, allowed_bytes, device_total), then one op per line:
  a ID SIZE STREAM     allocate SIZE bytes on stream index STREAM (0 = default, 1 = side)
  f ID                 free allocation ID
  e                    empty_cache
The header's segment_addresses are the device addresses of PyTorch's segment_alloc events, read
from micro_<name>.pickle, which the replay hands out in the same order.
  o SIZE STREAM        the allocation failed with OutOfMemoryError (message on the next line,
  m MESSAGE            prefixed by 'm ')
.stats: 'key value' per line, torch.cuda.memory_stats() after the sequence.
"""
import glob
import json
import os
import pickle
import sys


def main(src, dst):
    for path in sorted(glob.glob(os.path.join(src, "micro_*.json"))):
        name = os.path.basename(path)[:-5]
        d = json.load(open(path))
        allowed = d["cap_gib"] * 2**30 if d["cap_gib"] is not None else 0
        with open(os.path.join(dst, name + ".ops"), "w") as f:
            f.write(f"# conf {d['conf']}\n# allowed_bytes {allowed}\n")
            f.write(f"# device_total {d['device_total']}\n")
            snap = pickle.load(open(path[:-5] + ".pickle", "rb"))
            addrs = [e["addr"] for e in snap["device_traces"][0] if e["action"] == "segment_alloc"]
            f.write("# segment_addresses " + " ".join(map(str, addrs)) + "\n")
            messages = {o["step"]: o["message"] for o in d["ooms"]}
            step = 0
            for op in d["ops"]:
                if op[0] == "alloc":
                    f.write(f"a {op[1]} {op[2]} {op[3]}\n")
                elif op[0] == "free":
                    f.write(f"f {op[1]}\n")
                elif op[0] == "empty_cache":
                    f.write("e\n")
                else:
                    f.write(f"o {op[1]} {op[2]}\n")
                    msg = [m for s, m in sorted(messages.items()) if s >= step][0]
                    f.write("m " + msg.replace("\n", " ") + "\n")
                    del messages[min(s for s in messages if s >= step)]
                step += 1
        with open(os.path.join(dst, name + ".stats"), "w") as f:
            for k, v in sorted(d["memory_stats"].items()):
                f.write(f"{k} {v}\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
