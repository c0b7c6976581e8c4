"""A judge labels pairs: the labelling driver, the judges' prompts and parsers, the engine backends
(transformers, OpenAI-compatible servers such as vLLM), the per-request journal, and judges served as rerankers."""
