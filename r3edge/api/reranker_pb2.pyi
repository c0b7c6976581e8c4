from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Candidate(_message.Message):
    __slots__ = ("id", "text")
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    id: str
    text: str
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class RerankRequest(_message.Message):
    __slots__ = ("query", "candidates", "top_k")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    query: str
    candidates: _containers.RepeatedCompositeFieldContainer[Candidate]
    top_k: int
    def __init__(self, query: _Optional[str] = ..., candidates: _Optional[_Iterable[_Union[Candidate, _Mapping]]] = ..., top_k: _Optional[int] = ...) -> None: ...

class Result(_message.Message):
    __slots__ = ("id", "index", "score", "label_probs", "truncated")
    ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    LABEL_PROBS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    id: str
    index: int
    score: float
    label_probs: _containers.RepeatedScalarFieldContainer[float]
    truncated: bool
    def __init__(self, id: _Optional[str] = ..., index: _Optional[int] = ..., score: _Optional[float] = ..., label_probs: _Optional[_Iterable[float]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class Timing(_message.Message):
    __slots__ = ("queue_ms", "tokenize_ms", "inference_ms", "total_ms")
    QUEUE_MS_FIELD_NUMBER: _ClassVar[int]
    TOKENIZE_MS_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    queue_ms: float
    tokenize_ms: float
    inference_ms: float
    total_ms: float
    def __init__(self, queue_ms: _Optional[float] = ..., tokenize_ms: _Optional[float] = ..., inference_ms: _Optional[float] = ..., total_ms: _Optional[float] = ...) -> None: ...

class RerankResponse(_message.Message):
    __slots__ = ("results", "model", "timing", "truncated_docs", "query_truncated")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_DOCS_FIELD_NUMBER: _ClassVar[int]
    QUERY_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[Result]
    model: str
    timing: Timing
    truncated_docs: int
    query_truncated: bool
    def __init__(self, results: _Optional[_Iterable[_Union[Result, _Mapping]]] = ..., model: _Optional[str] = ..., timing: _Optional[_Union[Timing, _Mapping]] = ..., truncated_docs: _Optional[int] = ..., query_truncated: _Optional[bool] = ...) -> None: ...

class ScorePairsRequest(_message.Message):
    __slots__ = ("query", "documents")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    query: str
    documents: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, query: _Optional[str] = ..., documents: _Optional[_Iterable[str]] = ...) -> None: ...

class PairScore(_message.Message):
    __slots__ = ("score", "label_probs", "truncated")
    SCORE_FIELD_NUMBER: _ClassVar[int]
    LABEL_PROBS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    score: float
    label_probs: _containers.RepeatedScalarFieldContainer[float]
    truncated: bool
    def __init__(self, score: _Optional[float] = ..., label_probs: _Optional[_Iterable[float]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class ScorePairsResponse(_message.Message):
    __slots__ = ("scores", "model", "timing", "truncated_docs", "query_truncated")
    SCORES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_DOCS_FIELD_NUMBER: _ClassVar[int]
    QUERY_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    scores: _containers.RepeatedCompositeFieldContainer[PairScore]
    model: str
    timing: Timing
    truncated_docs: int
    query_truncated: bool
    def __init__(self, scores: _Optional[_Iterable[_Union[PairScore, _Mapping]]] = ..., model: _Optional[str] = ..., timing: _Optional[_Union[Timing, _Mapping]] = ..., truncated_docs: _Optional[int] = ..., query_truncated: _Optional[bool] = ...) -> None: ...

class ModelInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Limits(_message.Message):
    __slots__ = ("max_candidates", "max_batch_tokens", "max_batch_size", "max_concurrent_requests", "max_queue_delay_ms", "max_batch_wait_ms", "overflow", "workers")
    MAX_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUE_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    OVERFLOW_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    max_candidates: int
    max_batch_tokens: int
    max_batch_size: int
    max_concurrent_requests: int
    max_queue_delay_ms: float
    max_batch_wait_ms: float
    overflow: str
    workers: int
    def __init__(self, max_candidates: _Optional[int] = ..., max_batch_tokens: _Optional[int] = ..., max_batch_size: _Optional[int] = ..., max_concurrent_requests: _Optional[int] = ..., max_queue_delay_ms: _Optional[float] = ..., max_batch_wait_ms: _Optional[float] = ..., overflow: _Optional[str] = ..., workers: _Optional[int] = ...) -> None: ...

class ModelInfoResponse(_message.Message):
    __slots__ = ("artifact", "variant", "runtime", "label_tokens", "label_values", "max_query_tokens", "max_doc_tokens", "max_total_tokens", "scorer_fingerprint", "limits", "torch_loaded", "runtime_info_json", "device", "provider", "variant_reason")
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    LABEL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LABEL_VALUES_FIELD_NUMBER: _ClassVar[int]
    MAX_QUERY_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_DOC_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SCORER_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    TORCH_LOADED_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_INFO_JSON_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    VARIANT_REASON_FIELD_NUMBER: _ClassVar[int]
    artifact: str
    variant: str
    runtime: str
    label_tokens: _containers.RepeatedScalarFieldContainer[str]
    label_values: _containers.RepeatedScalarFieldContainer[float]
    max_query_tokens: int
    max_doc_tokens: int
    max_total_tokens: int
    scorer_fingerprint: str
    limits: Limits
    torch_loaded: bool
    runtime_info_json: str
    device: str
    provider: str
    variant_reason: str
    def __init__(self, artifact: _Optional[str] = ..., variant: _Optional[str] = ..., runtime: _Optional[str] = ..., label_tokens: _Optional[_Iterable[str]] = ..., label_values: _Optional[_Iterable[float]] = ..., max_query_tokens: _Optional[int] = ..., max_doc_tokens: _Optional[int] = ..., max_total_tokens: _Optional[int] = ..., scorer_fingerprint: _Optional[str] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., torch_loaded: _Optional[bool] = ..., runtime_info_json: _Optional[str] = ..., device: _Optional[str] = ..., provider: _Optional[str] = ..., variant_reason: _Optional[str] = ...) -> None: ...
