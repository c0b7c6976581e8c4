"""The reranking server: one scoring engine behind a gRPC front door and, optionally, an HTTP one.

Lifecycle only: bind (TLS and token auth when configured), report NOT_SERVING while the model loads
and the engine warms up, then SERVING; Prometheus metrics on ``--metrics-port``; on stop, NOT_SERVING
first, then ``prestop_delay_s`` of normal service (load balancers stop routing), then in-flight
requests get ``grace_period_s`` to finish. Scoring lives in :mod:`r3edge.serve.engine`, request
translation in :mod:`r3edge.serve.grpc_api` and :mod:`r3edge.serve.http_api`. Importing this module
never imports torch.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from r3edge.api import SERVICE_NAME
from r3edge.core.errors import Unavailable
from r3edge.serve import security
from r3edge.serve.config import ServeConfig
from r3edge.serve.engine import Engine, lower_priority
from r3edge.serve.grpc_api import RerankerService
from r3edge.serve.loading import DEFAULT_WORKERS, engine_for, load_runtime_for, workers_for
from r3edge.serve.metrics import ServeMetrics

log = logging.getLogger("r3edge.serve")

__all__ = ["RerankServer", "BackgroundServer", "serve_until_signal", "DEFAULT_WORKERS", "load_runtime_for", "workers_for"]


class RerankServer:
    """One server: its engine, the gRPC door, optionally the HTTP door and a metrics port."""

    def __init__(self, cfg: ServeConfig, runtime=None):
        self.cfg = cfg
        self._runtime = runtime
        self.port: int | None = None
        self.http_port: int | None = None
        self.metrics_port: int | None = None
        self.metrics = ServeMetrics()
        self.engine: Engine | None = None
        self.serving = False  # what /health and the gRPC health service say
        self._server: grpc.aio.Server | None = None
        self._http = None
        self._http_task: asyncio.Task | None = None
        self._metrics_httpd = None

    @property
    def runtime(self):
        return None if self.engine is None else self.engine.runtime

    async def start(self) -> int:
        cfg = self.cfg
        security.check_settings(cfg)
        self.tokens = security.load_tokens(cfg)
        credentials = security.grpc_credentials(cfg)
        mib = cfg.max_message_mb * 1024 * 1024
        self._server = grpc.aio.server(
            interceptors=[security.TokenAuthInterceptor(self.tokens)] if self.tokens else None,
            # no SO_REUSEPORT: a second server on a taken port must fail, not silently share the traffic
            options=[("grpc.max_receive_message_length", mib), ("grpc.max_send_message_length", mib),
                     ("grpc.so_reuseport", 0)])
        self.service = RerankerService(cfg, self.metrics)
        self._server.add_generic_rpc_handlers((self.service.handlers(),))
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            self._server)
        address = f"{cfg.host}:{cfg.port}"
        try:
            self.port = (self._server.add_secure_port(address, credentials) if credentials
                         else self._server.add_insecure_port(address))
        except RuntimeError as exc:  # grpc raises "Failed to bind" (older versions returned 0)
            raise Unavailable(f"cannot bind {address}: {exc}", "pick a free --port (or 0 for any)", field="port") from None
        if not self.port:
            raise Unavailable(f"cannot bind {address}", "pick a free --port (or 0 for any)", field="port")
        await self._set_health(False)
        await self._server.start()
        try:
            if cfg.metrics_port is not None:
                self._start_metrics_port()
            if cfg.http_port is not None:
                await self._start_http()
            loop = asyncio.get_running_loop()
            # opened and warmed up in a low-priority thread: the runtime's workers inherit its priority
            with ThreadPoolExecutor(1, thread_name_prefix="r3edge-load", initializer=lower_priority) as loader:
                runtime = self._runtime or await loop.run_in_executor(loader, load_runtime_for, cfg)
                engine = engine_for(cfg, runtime, self.metrics)
                await loop.run_in_executor(loader, engine.start)
        except BaseException:
            await self._close_ports()  # never leave a bound port that can only say NOT_SERVING
            raise
        self.engine = engine
        self.service.set_engine(engine)
        self.metrics.describe_model(engine.runtime)
        await self._set_health(True)
        log.info("serving %s %s on %s:%s%s (%s: %s)", cfg.artifact, self.service.variant or "-", cfg.host, self.port,
                 f" (HTTP :{self.http_port})" if self.http_port else "", engine.runtime.name, engine.runtime.variant_reason)
        return self.port

    async def _set_health(self, serving: bool) -> None:
        self.serving = serving
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for svc in ("", SERVICE_NAME):
            await self.health.set(svc, status)

    def _start_metrics_port(self) -> None:
        from prometheus_client import start_http_server

        self._metrics_httpd, _ = start_http_server(self.cfg.metrics_port, addr=self.cfg.host, registry=self.metrics.registry)
        self.metrics_port = self._metrics_httpd.server_address[1]

    async def _start_http(self) -> None:
        import uvicorn

        from r3edge.serve.http_api import build_app

        config = uvicorn.Config(build_app(self), host=self.cfg.host, port=self.cfg.http_port, log_config=None,
                                access_log=False, lifespan="off", **security.uvicorn_tls(self.cfg))
        self._http = uvicorn.Server(config)
        self._http.install_signal_handlers = lambda: None  # the server's own SIGTERM handling drains both doors
        self._http_task = asyncio.create_task(self._http.serve())
        while not self._http.started:
            if self._http_task.done():
                await self._http_task  # raises what stopped it (e.g. the port is taken)
                raise Unavailable(f"HTTP port {self.cfg.http_port} did not start", "pick a free --http-port",
                                  field="http_port")
            await asyncio.sleep(0.01)
        self.http_port = self._http.servers[0].sockets[0].getsockname()[1]

    async def stop(self, grace: float | None = None, prestop: float | None = None) -> None:
        """NOT_SERVING first, ``prestop`` seconds of normal service, then in-flight requests finish."""
        if self._server is None:
            return
        await self.health.enter_graceful_shutdown()
        self.serving = False
        delay = self.cfg.prestop_delay_s if prestop is None else prestop
        if delay:
            log.info("NOT_SERVING; still serving for the pre-stop delay of %.1f s", delay)
            await asyncio.sleep(delay)
        grace = self.cfg.grace_period_s if grace is None else grace
        if self._http is not None:
            self._http.should_exit = True
        await self._server.stop(grace)
        await self._close_ports()

    async def _close_ports(self) -> None:
        if self._http_task is not None:
            self._http.should_exit = True
            await asyncio.wait({self._http_task}, timeout=self.cfg.grace_period_s + 5)
            self._http_task = self._http = None
        if self._metrics_httpd is not None:
            self._metrics_httpd.shutdown()
            self._metrics_httpd = None
        if self._server is not None:
            await self._server.stop(0)
            self._server = None
        if self.engine is not None:
            self.engine.stop()

    async def wait_for_termination(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()


async def serve_until_signal(cfg: ServeConfig) -> None:
    """Run until SIGINT/SIGTERM, then stop gracefully (the `r3edge serve` entry point)."""
    import signal

    server = RerankServer(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    http = f", HTTP on {cfg.host}:{server.http_port}" if server.http_port else ""
    metrics = f", metrics on {cfg.host}:{server.metrics_port}" if server.metrics_port else ""
    print(f"serving {cfg.artifact} {server.service.variant or '-'} on {cfg.host}:{server.port}{http}{metrics}", flush=True)
    await stop.wait()
    log.info("stopping: pre-stop %.1f s, then draining for up to %.1f s", cfg.prestop_delay_s, cfg.grace_period_s)
    await server.stop()


class BackgroundServer:
    """A server on its own event-loop thread, for tests, benchmarks and notebooks."""

    def __init__(self, cfg: ServeConfig, runtime=None):
        self.cfg = cfg
        self._runtime = runtime
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="r3edge-server", daemon=True)
        self.server: RerankServer | None = None

    def start(self, timeout: float = 300) -> BackgroundServer:
        self._thread.start()

        async def _start():
            self.server = RerankServer(self.cfg, self._runtime)
            return await self.server.start()

        asyncio.run_coroutine_threadsafe(_start(), self._loop).result(timeout)
        return self

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def target(self) -> str:
        return f"{self.cfg.host}:{self.port}"

    @property
    def runtime(self):
        return self.server.runtime

    def stop(self, grace: float = 1.0, prestop: float = 0.0) -> None:
        if self.server is not None:
            asyncio.run_coroutine_threadsafe(self.server.stop(grace, prestop), self._loop).result(grace + prestop + 60)
            self.server = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
