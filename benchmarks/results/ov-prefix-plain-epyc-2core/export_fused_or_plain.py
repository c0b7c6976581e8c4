"""Export a student with fp32 + ov-int8 and prefix reuse, its cosine candidate graph fused (as r3edge does)
or plain (ONNX Runtime's fusion switched off for this run), and print what the gates said.

    python export_fused_or_plain.py OUT_DIR fused|plain STUDENT_DIR [CALIB_PAIRS.jsonl]

Used for the SemEval student's side-by-side (README, "Why the fused graph stays first"): the plain export is
what r3edge now falls back to only when an OpenVINO IR of the fused graph fails its gate.
"""
import json
import sys

out, graph, student = sys.argv[1], sys.argv[2], sys.argv[3]
if graph == "plain":
    import r3edge.export.fusion as fusion

    fusion.fusable = lambda config: False
from r3edge.export.onnx import export_artifact  # noqa: E402

export_artifact(student, out, variants=["fp32", "ov-int8"], calib_pairs=sys.argv[4] if len(sys.argv) > 4 else None,
                prefix_reuse=True)
report = json.load(open(f"{out}/export_report.json"))
print("rejected", report["rejected"])
print("prefix reuse", {k: (v["batch_invariance_max_abs_score_diff"], v["candidate_graph"]["exporter"])
                       for k, v in report["prefix_reuse"].items()})
