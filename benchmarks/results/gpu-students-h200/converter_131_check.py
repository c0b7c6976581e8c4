"""Does r3edge's fp16 export survive onnxruntime 1.31's float16 converter, the one the H200 ran?

On the H200 the 1.5B-shape causal export failed: onnxruntime-gpu 1.31.1's ``convert_float_to_float16`` wrote
repeated ``{value}_cast_to_fp32_node`` Casts, and onnxruntime refused the graph. This CPU machine has
onnxruntime 1.32, whose converter shares one Cast per value, so the script loads 1.31.1's converter from the
wheel instead:

    pip download --no-deps onnxruntime==1.31.1 -d /tmp/ort131
    (cd /tmp/ort131 && unzip -o onnxruntime-1.31.1-*.whl onnxruntime/transformers/float16.py)
    python converter_131_check.py runs/ARTIFACT/model.fp32.onnx /tmp/ort131/onnxruntime/transformers/float16.py

It converts a causal student's fp32 graph as ``export/quantize.py``'s ``_to_fp16`` does (RMSNorm variance
kept fp32), tries to load it, drops the repeats with ``_drop_duplicate_nodes`` and loads it again.
``converter_131_check.txt`` is its output on the smoke's tiny Qwen2 causal student
(``SMOKE=1 benchmarks/gpu/prepare.sh && SMOKE=1 bash benchmarks/gpu/run.sh bench``).
"""

import importlib.util
import sys

import onnx
import onnxruntime as ort

from r3edge.export.quantize import _drop_duplicate_nodes, _rms_variance_nodes

spec = importlib.util.spec_from_file_location("float16_131", sys.argv[2])
float16_131 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(float16_131)

model = onnx.load(sys.argv[1])
model = float16_131.convert_float_to_float16(model, keep_io_types=True, disable_shape_infer=True,
                                             node_block_list=_rms_variance_nodes(model))
try:
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    print("1.31 converter: loads as is")
except Exception as exc:  # onnxruntime raises its own exception types
    print("1.31 converter: refused:", str(exc)[:160])
print("dropped", _drop_duplicate_nodes(model))
ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
print("after the drop: loads")
