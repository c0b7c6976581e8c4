"""Two threads make their first OpenVINO infer calls at once, in fresh processes; count the hangs.

    python ov_first_call_race.py ARTIFACT_DIR [--runs 20] [--timeout 20]

Each child compiles the artifact's prefix.fp32.onnx on OpenVINO's CPU plugin (r3edge's compile_ir) and
releases two threads together through a barrier. `raw`: each thread makes its own infer request and calls
it (OpenVINO's Python API as is). `irsession`: both call one r3edge IrSession (each thread its own request,
the session's first call alone). A child still running after --timeout seconds is counted as hung.
"""
import argparse
import subprocess
import sys

CHILD = r'''
import sys, threading
import numpy as np
from r3edge.core.openvino_runtime import IrSession, compile_ir
mode, art = sys.argv[1], sys.argv[2]
compiled = compile_ir(f"{art}/prefix.fp32.onnx", threads=1)
feeds = {"input_ids": np.ones((1, 20), dtype=np.int64)}
session = IrSession(compiled)
out = [o.name for o in session.get_outputs()]
barrier = threading.Barrier(2)
def go():
    barrier.wait()
    if mode == "raw":
        r = compiled.create_infer_request(); res = r.infer(feeds); np.array(res[compiled.output(0)])
    else:
        session.run(out, feeds)
ts = [threading.Thread(target=go) for _ in range(2)]
[t.start() for t in ts]; [t.join() for t in ts]
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("artifact")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=20.0)
    a = ap.parse_args()
    for mode in ("raw", "irsession"):
        hung = 0
        for _ in range(a.runs):
            try:
                subprocess.run([sys.executable, "-c", CHILD, mode, a.artifact], timeout=a.timeout, check=True,
                               capture_output=True)
            except subprocess.TimeoutExpired:
                hung += 1
        print(f"{mode}: {hung} of {a.runs} fresh processes hung (> {a.timeout:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
