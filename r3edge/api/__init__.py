"""The gRPC reranking API: the .proto, its generated stubs and a typed client.

The API is the contract between the server (``r3edge.serve``) and everything that calls it
(``r3edge rerank``, ``r3edge eval --server``, the benchmarks, a user's re-rank stage), so it sits
below all of them and imports neither torch nor grpcio-tools. The stubs are plain committed files
(``make proto`` regenerates them; a test keeps them equal to the .proto)::

    from r3edge.api import pb2, pb2_grpc, SERVICE_NAME
"""

from __future__ import annotations

from r3edge.api import reranker_pb2 as pb2
from r3edge.api import reranker_pb2_grpc as pb2_grpc

SERVICE_NAME = pb2.DESCRIPTOR.services_by_name["Reranker"].full_name

__all__ = ["pb2", "pb2_grpc", "SERVICE_NAME"]
