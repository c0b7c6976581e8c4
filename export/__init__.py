"""Export a trained student to scoring graphs (ONNX fp32/fp16/int8) with parity checks."""
