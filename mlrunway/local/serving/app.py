"""The endpoint's HTTP server (ASGI, run by uvicorn): Azure ML's online-endpoint contract on 127.0.0.1.

Routes: ``POST /score`` (the scoring URI: key auth, traffic weights, the ``azureml-model-deployment`` header,
mirror traffic), ``POST /deployments/{name}/score`` (one deployment, as its own scoring server answers),
``GET /`` ("Healthy"), ``GET /healthz/live`` and ``GET /healthz/ready``.

Statuses, as Azure answers: 200; 400 from score.py for a bad request; 401 missing or wrong key; 404 no such
deployment or none with traffic; 408 past ``request_timeout_ms``; 413 body over ``max_body_bytes``; 429 too
many requests in flight; an exception in score.py is a 500 from the deployment and a 424 at the scoring URI
(``ms-azureml-model-error-statuscode: 500``), each with an error id that the deployment's log holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from mlrunway.local.serving.metrics import MODEL_STATUS_HEADER, Recorder
from mlrunway.local.serving.runtime import LoadedDeployment, Runtime
from mlrunway.local.serving.state import EndpointState

ENDPOINT_DIR_ENV = "MLRUNWAY_ENDPOINT_DIR"
SCORING_THREADS_ENV = "MLRUNWAY_SCORING_THREADS"
DEPLOYMENT_HEADER = "azureml-model-deployment"
DRAIN_CAP_BYTES = 64 * 1024 * 1024


def _error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class ScoringApp:
    """:param scoring_threads: threads of this worker that run score.py's ``run()``. Requests beyond them wait
        in the event loop, not as runnable threads: on a few cores, dozens of threads each running the model
        contend with one another and with the other workers, and the tail latency grows."""

    def __init__(self, endpoint_dir: Path, scoring_threads: int = 1) -> None:
        self.runtime = Runtime(endpoint_dir)
        self.metrics = Recorder(endpoint_dir)
        self.in_flight = 0
        # run() calls still running after their request was answered 408: a thread cannot be stopped, so each
        # holds a place of the worker's admission until it ends, and the next requests are refused (429), not
        # queued unseen behind it.
        self.overrun = 0
        self.background: set[asyncio.Task[Any]] = set()
        self.pool = ThreadPoolExecutor(max_workers=scoring_threads, thread_name_prefix="score")

    @staticmethod
    def authorized(request: Request, state: EndpointState) -> bool:
        header = request.headers.get("authorization", "")
        given = header[7:].encode() if header.lower().startswith("bearer ") else b""
        keys = state.keys
        # Compare against both keys every time: constant time, whichever matches.
        results = [hmac.compare_digest(given, key.encode()) for key in (keys["primary"], keys["secondary"])]
        return bool(given) and any(results)

    @staticmethod
    async def read_body(request: Request, limit: int) -> bytes | Response:
        """The body, or a 413 once it has been read past the limit. An oversized body is still drained (up to
        ``DRAIN_CAP_BYTES``) before answering: closing while the client is still sending breaks its pipe, and
        it would never see the 413."""
        body, size = bytearray(), 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size <= limit:
                    body += chunk
                elif size > DRAIN_CAP_BYTES:
                    break
        except ClientDisconnect:  # the client left, or the server refused its body (guard.py): nobody to answer
            return Response(status_code=400)
        if size > limit:
            return _error(413, f"request body is over the limit of {limit} bytes")
        return bytes(body)

    async def score(self, request: Request) -> Response:
        return await self._handle(request, direct=request.path_params.get("name"))

    async def _handle(self, request: Request, direct: str | None) -> Response:
        state = self.runtime.current()  # once per request: keys, limits and traffic from one reading
        if not self.authorized(request, state):
            return _error(401, "missing or wrong key: send 'Authorization: Bearer <endpoint key>'",
                          **{"www-authenticate": 'Bearer realm="endpoint"'})
        if self.in_flight + self.overrun >= state.max_concurrent_requests_per_worker:
            return _error(429, "too many requests in flight; retry later")
        body = await self.read_body(request, state.max_body_bytes)
        if isinstance(body, Response):
            return body
        name = direct or request.headers.get(DEPLOYMENT_HEADER, "").strip() or self.runtime.choose(state)
        if name is None:
            return _error(404, "no deployment of this endpoint has traffic; set traffic or name one in the "
                               f"{DEPLOYMENT_HEADER} header")
        # The newest version: already loaded, at once; else loaded (init() runs) off the event loop.
        deployment = self.runtime.loaded(state, name) or await run_in_threadpool(self.runtime.deployment, name)
        if deployment is None:
            return _error(404, f"deployment {name!r} does not exist on endpoint {state.name}")
        if direct is None and (mirror := self.runtime.mirror_target(state)) and mirror != name:
            task = asyncio.create_task(self._mirror(mirror, body, state))
            self.background.add(task)
            task.add_done_callback(self.background.discard)
        return await self._run(deployment, body, state.request_timeout_ms, at_endpoint=direct is None)

    async def _run(self, deployment: LoadedDeployment, body: bytes, timeout_ms: int, at_endpoint: bool) -> Response:
        """Score and record the deployment's request, status and latency (:mod:`metrics`)."""
        started = time.perf_counter()
        response = await self._score(deployment, body, timeout_ms, at_endpoint)
        self.metrics.record(deployment.state.name, response.status_code, response.headers.get(MODEL_STATUS_HEADER),
                            time.perf_counter() - started)
        return response

    async def _score(self, deployment: LoadedDeployment, body: bytes, timeout_ms: int, at_endpoint: bool) -> Response:
        headers = {DEPLOYMENT_HEADER: deployment.state.name}
        self.in_flight += 1
        running = self.pool.submit(deployment.module.run, body.decode("utf-8", "replace"))
        try:
            async with asyncio.timeout(timeout_ms / 1000):  # unlike wait_for, no extra task per request
                result = await asyncio.wrap_future(running)
        except TimeoutError:
            if not running.cancel():  # it had started: it runs on in its thread, and is counted until it ends
                self._overran(running, deployment)
            return _error(408, f"scoring took longer than request_timeout_ms={timeout_ms}", **headers)
        except Exception as exc:  # noqa: BLE001 - any failure of the user's script becomes an error id
            error_id = uuid.uuid4().hex
            deployment.log.exception("run() failed, error id %s", error_id)
            message = f"score.py run() raised {type(exc).__name__}: {exc}"
            payload = {"error": message, "error_id": error_id}
            if at_endpoint:
                headers |= {"ms-azureml-model-error-statuscode": "500",
                            "ms-azureml-model-error-reason": f"{type(exc).__name__}; error id {error_id}"}
                return JSONResponse(payload, status_code=424, headers=headers)
            return JSONResponse(payload, status_code=500, headers=headers)
        finally:
            self.in_flight -= 1
        if hasattr(result, "status_code"):  # AMLResponse
            message = result.message
            media = "application/json" if getattr(result, "json_str", False) else "text/plain"
            status = int(result.status_code)
            if at_endpoint and status != 200:  # as Azure: any non-200 of score.py is a 424 at the scoring URI
                reason = (message if isinstance(message, str) else json.dumps(message))[:200].replace("\n", " ")
                headers |= {"ms-azureml-model-error-statuscode": str(status), "ms-azureml-model-error-reason": reason}
                status = 424
            return Response(message, status_code=status, headers=headers, media_type=media)
        return Response(json.dumps(result), headers=headers, media_type="application/json")

    def _overran(self, running: Future[Any], deployment: LoadedDeployment) -> None:
        loop = asyncio.get_running_loop()
        self.overrun += 1
        deployment.log.warning("run() is still running past its request's 408; %d such call(s) hold a place of "
                               "this worker's admission", self.overrun)

        def ended(_: Future[Any]) -> None:
            loop.call_soon_threadsafe(self._end_overrun)

        running.add_done_callback(ended)

    def _end_overrun(self) -> None:
        self.overrun -= 1

    async def _mirror(self, name: str, body: bytes, state: EndpointState) -> None:
        deployment = await run_in_threadpool(self.runtime.deployment, name)
        if deployment is not None:
            await self._run(deployment, body, state.request_timeout_ms, at_endpoint=False)
            deployment.log.info("mirrored request scored (response discarded)")

    async def ready(self, _request: Request) -> Response:
        ok = await run_in_threadpool(self.runtime.ready)
        return PlainTextResponse("ready" if ok else "not ready", status_code=200 if ok else 503)


def create_app() -> Starlette:
    """The app factory uvicorn calls in each worker; the endpoint folder comes from the environment. A worker
    that serves writes its PID under ``ready/``, which is how a (re)started master knows its workers are up."""
    folder = Path(os.environ[ENDPOINT_DIR_ENV])
    scoring = ScoringApp(folder, int(os.environ.get(SCORING_THREADS_ENV, "1")))

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        marker = folder / "ready" / str(os.getpid())
        marker.parent.mkdir(exist_ok=True)
        marker.touch()
        flusher = asyncio.create_task(scoring.metrics.run())
        yield
        flusher.cancel()
        scoring.metrics.flush(everything=True)
        marker.unlink(missing_ok=True)

    app = Starlette(lifespan=lifespan, routes=[
        Route("/", lambda _r: PlainTextResponse("Healthy"), methods=["GET"]),
        Route("/healthz/live", lambda _r: PlainTextResponse("live"), methods=["GET"]),
        Route("/healthz/ready", scoring.ready, methods=["GET"]),
        Route("/score", scoring.score, methods=["POST"]),
        Route("/deployments/{name}/score", scoring.score, methods=["POST"]),
    ])
    app.router.redirect_slashes = False  # a redirect's Location would be built from the client's Host header
    return app
