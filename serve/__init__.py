"""The gRPC reranking server (torch-free: onnxruntime, tokenizers, numpy, grpcio)."""
