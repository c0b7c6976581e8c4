"""RSS of one compiled IR over 1,200 random (pairs, tokens) input shapes, with OpenVINO's default per-shape
runtime cache or a bounded one. Usage: ``python ov_rss.py MODEL.xml [CPU_RUNTIME_CACHE_CAPACITY]``."""
import random
import sys

import numpy as np
import openvino as ov

path = sys.argv[1]
cfg = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "SNIPPETS_MODE": "DISABLE"}  # as r3edge compiles it
if len(sys.argv) > 2:
    cfg["CPU_RUNTIME_CACHE_CAPACITY"] = sys.argv[2]
core = ov.Core()
compiled = core.compile_model(core.read_model(path, path.replace(".xml", ".bin")), "CPU", cfg)
names = [i.get_any_name() for i in compiled.inputs]
request = compiled.create_infer_request()


def rss_mb() -> int:
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024


random.seed(0)
print("capacity", cfg.get("CPU_RUNTIME_CACHE_CAPACITY", "default"), "inputs", names, "rss start", rss_mb(), flush=True)
for k in range(1, 1201):
    b, t = random.randint(1, 100), random.randint(4, 180)
    request.infer({n: (np.random.randint(100, 1000, (b, t)) if "ids" in n else np.ones((b, t))).astype(np.int64) for n in names})
    if k % 200 == 0:
        print(k, "shapes, rss", rss_mb(), flush=True)
