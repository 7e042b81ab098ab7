"""The endpoint's HTTP server (a bare ASGI app, run by uvicorn): Azure ML's online-endpoint contract.

Routes: ``POST /score`` (the scoring URI: key auth, traffic weights, the ``azureml-model-deployment`` header,
mirror traffic), ``POST /deployments/{name}/score`` (one deployment, as its own scoring server answers),
``GET /`` ("Healthy"), ``GET /healthz/live`` and ``GET /healthz/ready``. No framework: each request is one pass
over its ASGI scope, so the path around score.py's ``run()`` costs little next to the scoring itself
(``bench/endpoint.py`` measures it against the same work with nothing around it).

Statuses, as Azure answers: :data:`STATUSES` (the docs' reference renders it; a test holds it to the statuses this
app and the server's guard answer). Each error carries an error id that the deployment's log holds. Limits on the
request's head and on slow clients are the server's, before this app (:mod:`guard`).
"""

from __future__ import annotations

import asyncio
import collections
import hmac
import json
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mlrunway.serving import capture
from mlrunway.serving.metrics import Recorder
from mlrunway.serving.runtime import LoadedDeployment, Runtime, StateLoader
from mlrunway.serving.state import EndpointState

log = logging.getLogger(__name__)

# What the endpoint answers and when, as Azure ML's online endpoints do; 408, 413 and 431 come from the server's
# guard (mlrunway.serving.guard) too, before the request reaches this app.
STATUSES: dict[int, str] = {
    200: "the deployment's answer (`GET /`, `/healthz/live` and a ready `/healthz/ready`: plain text)",
    400: "score.py refused the request (its message is the body); or a client that left before its body arrived",
    401: "a missing or wrong key: send `Authorization: Bearer <endpoint key>`",
    404: "no such route; no deployment of this name on the endpoint; or none has traffic and the request names none",
    408: "scoring took longer than the deployment's `request_timeout_ms`; or (the guard) a request head or body that "
         "did not arrive whole within `header_timeout_s` / `body_timeout_s`",
    413: "the body is over the endpoint's `max_body_bytes`",
    424: "at the scoring URI: score.py failed or answered an error; its own status is in the header "
         "`ms-azureml-model-error-statuscode` (500 for an exception)",
    429: "more requests in flight in a worker than the endpoint's `max_concurrent_requests_per_worker` (64), "
         "`run()` calls still running past their 408 counted; retry later",
    431: "(the guard) a request head over `max_header_bytes` or with more than `max_headers` fields",
    500: "asked by `/deployments/<name>/score`, an exception in score.py (the scoring URI says 424)",
    503: "`/healthz/ready` while no deployment is ready",
}

ENDPOINT_DIR_ENV = "MLRUNWAY_ENDPOINT_DIR"
SCORING_THREADS_ENV = "MLRUNWAY_SCORING_THREADS"
DEPLOYMENT_HEADER = "azureml-model-deployment"
# Header names as ASGI carries them (bytes), made once rather than on every request.
DEPLOYMENT_KEY = DEPLOYMENT_HEADER.encode()
MODEL_STATUS_KEY = b"ms-azureml-model-error-statuscode"
MODEL_REASON_KEY = b"ms-azureml-model-error-reason"
DRAIN_CAP_BYTES = 64 * 1024 * 1024
MIRROR_DRAIN_S = 8.0  # at most, at shutdown: under the 10 s the endpoint's stop gives before SIGKILL (master.stop)
JSON_TYPE = b"application/json"

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


class Answer:
    """A response: status, body and headers (as bytes pairs, the way ASGI sends them)."""

    __slots__ = ("body", "headers", "model_status", "ms", "status")

    def __init__(self, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None,
                 media: bytes = JSON_TYPE, model_status: str | None = None) -> None:
        self.status, self.body, self.model_status = status, body, model_status
        self.ms = 0.0  # how long the deployment took to answer (set once it has)
        self.headers = [(b"content-type", media), *(headers or [])]

    @property
    def at_deployment(self) -> int:
        """The status the deployment itself gave: a 424 at the scoring URI carries it as its model status."""
        return int(self.model_status) if self.model_status else self.status

    async def send(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


def _error(status: int, message: str, headers: list[tuple[bytes, bytes]] | None = None) -> Answer:
    return Answer(status, json.dumps({"error": message}).encode(), headers)


class Ticket:
    """One ``run()`` call between the event loop and a scoring thread. ``answered``: its request has had its
    answer (a 408) and it must not start; ``started``: a thread runs it. Both change under the ticket's lock."""

    __slots__ = ("answered", "future", "lock", "run", "started", "text")

    def __init__(self, run: Callable[[str], Any], text: str, future: asyncio.Future[Any]) -> None:
        self.run, self.text, self.future = run, text, future
        self.lock = threading.Lock()
        self.answered = self.started = False

    def give_up(self) -> bool:
        """The request is answered without it (a 408): True when a thread already runs it (it runs on)."""
        with self.lock:
            self.answered = True
            return self.started


class Scorer:
    """The worker's scoring threads and the hop to them: a ticket is queued to the threads; ended calls are handed
    back in a deque, and the event loop is woken once for however many ended while it was busy (one
    ``call_soon_threadsafe``, one write to its self-pipe). Leaner than an executor's chain of futures with a
    wake-up each, which costs a measurable share of a sub-millisecond request. ``on_overrun_end`` is called on
    the loop when a call whose request was already answered ends."""

    def __init__(self, threads: int, on_overrun_end: Callable[[], None]) -> None:
        self.tickets: queue.SimpleQueue[Ticket] = queue.SimpleQueue()
        self.ended: collections.deque[tuple[Ticket, Any, bool]] = collections.deque()
        self.wake_pending = threading.Event()
        self.on_overrun_end = on_overrun_end
        for index in range(threads):
            threading.Thread(target=self._work, name=f"score-{index}", daemon=True).start()

    def submit(self, run: Callable[[str], Any], text: str, loop: asyncio.AbstractEventLoop) -> Ticket:
        ticket = Ticket(run, text, loop.create_future())
        self.tickets.put(ticket)
        return ticket

    def _work(self) -> None:
        while True:
            ticket = self.tickets.get()
            with ticket.lock:
                if ticket.answered:  # its request timed out before a thread was free: never run it
                    continue
                ticket.started = True
            try:
                outcome, failed = ticket.run(ticket.text), False
            except BaseException as exc:  # noqa: BLE001 - handed to the request, which turns it into an error id
                outcome, failed = exc, True
            self.ended.append((ticket, outcome, failed))
            if not self.wake_pending.is_set():
                self.wake_pending.set()
                ticket.future.get_loop().call_soon_threadsafe(self._settle_all)

    def _settle_all(self) -> None:
        self.wake_pending.clear()  # before draining: what ends from now on wakes the loop again
        while self.ended:
            ticket, outcome, failed = self.ended.popleft()
            if ticket.answered:
                self.on_overrun_end()
            elif not ticket.future.done():
                ticket.future.set_exception(outcome) if failed else ticket.future.set_result(outcome)


class Deadlines:
    """Every request's deadline in one queue, swept every ``tick_s`` by one task: no timer per request. The
    endpoint's requests share one ``request_timeout_ms``, so they expire in the order they came; a change of the
    timeout reorders at most one sweep's worth. A 408 comes within ``tick_s`` of its deadline."""

    def __init__(self, tick_s: float = 0.01) -> None:
        self.tick_s = tick_s
        self.pending: collections.deque[tuple[float, asyncio.Future[Any]]] = collections.deque()

    def add(self, deadline: float, future: asyncio.Future[Any]) -> None:
        self.pending.append((deadline, future))

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            now = time.monotonic()
            while self.pending and (self.pending[0][0] <= now or self.pending[0][1].done()):
                _, future = self.pending.popleft()
                if not future.done():
                    future.set_exception(TimeoutError())


class ScoringApp:
    """:param load_state: reads the endpoint's state from its folder, as the backend that runs it keeps it.
    :param scoring_threads: threads of this worker that run score.py's ``run()``. Requests beyond them wait
        in the event loop, not as runnable threads: on a few cores, dozens of threads each running the model
        contend with one another and with the other workers, and the tail latency grows."""

    def __init__(self, endpoint_dir: Path, load_state: StateLoader, scoring_threads: int = 1) -> None:
        self.dir = endpoint_dir
        self.runtime = Runtime(endpoint_dir, load_state)
        self.metrics = Recorder(endpoint_dir)
        self.scorer = Scorer(scoring_threads, self._end_overrun)
        self.in_flight = 0
        # run() calls still running after their request was answered 408: a thread cannot be stopped, so each
        # holds a place of the worker's admission until it ends, and the next requests are refused (429), not
        # queued unseen behind it.
        self.overrun = 0
        self.background: set[asyncio.Task[Any]] = set()
        self.deadlines = Deadlines()

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await (await self.route(scope, receive)).send(send)
        elif scope["type"] == "lifespan":
            await self.lifespan(receive, send)

    async def route(self, scope: dict[str, Any], receive: Receive) -> Answer:
        method, path = scope["method"], scope["path"]
        if method == "POST" and path == "/score":
            return await self.score(scope, receive, None)
        if method == "POST" and path.startswith("/deployments/") and path.endswith("/score"):
            name = path[len("/deployments/"):-len("/score")]
            if name and "/" not in name:
                return await self.score(scope, receive, name)
        if method == "GET" and path in ("/", "/healthz/live"):
            return Answer(200, b"Healthy" if path == "/" else b"live", media=b"text/plain; charset=utf-8")
        if method == "GET" and path == "/healthz/ready":
            ok = await asyncio.to_thread(self.runtime.ready)
            return Answer(200 if ok else 503, b"ready" if ok else b"not ready", media=b"text/plain; charset=utf-8")
        return _error(404, f"no route {method} {path}")

    async def lifespan(self, receive: Receive, send: Send) -> None:
        """A worker that serves writes its PID under ``ready/``: how a (re)started master knows its workers are up."""
        marker = self.dir / "ready" / str(os.getpid())
        tasks: list[asyncio.Task[None]] = []
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                marker.parent.mkdir(exist_ok=True)
                marker.touch()
                tasks = [asyncio.create_task(self.metrics.run()), asyncio.create_task(self.deadlines.run())]
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.background:  # mirrored copies still scoring (uvicorn waits only for requests): they end
                    # (their deadlines still run) before the last flush, or their captures would be cut in two
                    await asyncio.wait(set(self.background), timeout=MIRROR_DRAIN_S)
                for task in tasks:
                    task.cancel()
                try:
                    self.metrics.flush()
                except OSError as error:  # a full disk at shutdown: the worker still stops
                    log.warning("endpoint metrics lost at shutdown: %s", error)
                capture.WRITER.flush()
                marker.unlink(missing_ok=True)
                await send({"type": "lifespan.shutdown.complete"})
                return

    @staticmethod
    def authorized(header: bytes, state: EndpointState) -> bool:
        given = header[7:] if header[:7].lower() == b"bearer " else b""
        keys = state.keys
        # Compare against both keys every time: constant time, whichever matches.
        results = [hmac.compare_digest(given, key.encode()) for key in (keys["primary"], keys["secondary"])]
        return bool(given) and any(results)

    @staticmethod
    async def read_body(receive: Receive, limit: int) -> bytes | Answer:
        """The body, or a 413 once it has been read past the limit. An oversized body is still drained (up to
        ``DRAIN_CAP_BYTES``) before answering: closing while the client is still sending breaks its pipe, and
        it would never see the 413. A client that left (or that the server refused, guard.py) gets a 400 that
        nobody reads."""
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return Answer(400, b"")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size <= limit:
                chunks.append(chunk)
            elif size > DRAIN_CAP_BYTES:
                break
            more = message.get("more_body", False)
        if size > limit:
            return _error(413, f"request body is over the limit of {limit} bytes")
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def score(self, scope: dict[str, Any], receive: Receive, direct: str | None) -> Answer:
        state = self.runtime.current()  # once per request: keys, limits and traffic from one reading
        authorization, named = b"", b""
        for key, value in scope["headers"]:
            if key == b"authorization":
                authorization = value
            elif key == DEPLOYMENT_KEY:
                named = value
        if not self.authorized(authorization, state):
            return _error(401, "missing or wrong key: send 'Authorization: Bearer <endpoint key>'",
                          [(b"www-authenticate", b'Bearer realm="endpoint"')])
        if self.in_flight + self.overrun >= state.max_concurrent_requests_per_worker:
            return _error(429, "too many requests in flight; retry later")
        body = await self.read_body(receive, state.max_body_bytes)
        if isinstance(body, Answer):
            return body
        name = direct or named.decode("latin-1").strip() or self.runtime.choose(state)
        if name is None:
            return _error(404, "no deployment of this endpoint has traffic; set traffic or name one in the "
                               f"{DEPLOYMENT_HEADER} header")
        # The newest version: already loaded, at once; else loaded (init() runs) off the event loop.
        deployment = self.runtime.loaded(state, name) or await asyncio.to_thread(self.runtime.deployment, name)
        if deployment is None:
            return _error(404, f"deployment {name!r} does not exist on endpoint {state.name}")
        if direct is None and state.mirror_traffic and (mirror := self.runtime.mirror_target(state)) and mirror != name:
            primary = asyncio.ensure_future(self._run(deployment, body, state.request_timeout_ms, at_endpoint=True))
            task = asyncio.create_task(self._mirror(mirror, name, body, state, primary))
            self.background.add(task)
            task.add_done_callback(self.background.discard)
            return await primary
        return await self._run(deployment, body, state.request_timeout_ms, at_endpoint=direct is None)

    async def _run(self, deployment: LoadedDeployment, body: bytes, timeout_ms: int, at_endpoint: bool) -> Answer:
        """Score and record the deployment's request, status and latency (:mod:`metrics`)."""
        started = time.perf_counter()
        answer = await self._score(deployment, body, timeout_ms, at_endpoint)
        elapsed = time.perf_counter() - started
        answer.ms = elapsed * 1000
        self.metrics.record(deployment.state.name, answer.status, answer.model_status, elapsed)
        if deployment.capture is not None:  # payload logging: queued here, written by the capture thread
            capture.WRITER.payload(deployment.capture, body, answer.at_deployment, answer.body)
        return answer

    async def _score(self, deployment: LoadedDeployment, body: bytes, timeout_ms: int, at_endpoint: bool) -> Answer:
        headers = [(DEPLOYMENT_KEY, deployment.state.name.encode())]
        self.in_flight += 1
        loop = asyncio.get_running_loop()
        ticket = self.scorer.submit(deployment.module.run, body.decode("utf-8", "replace"), loop)
        self.deadlines.add(time.monotonic() + timeout_ms / 1000, ticket.future)
        try:
            result = await ticket.future
        except TimeoutError:
            if ticket.give_up():  # it runs on in its thread, and is counted until it ends
                self._overran(deployment)
            return _error(408, f"scoring took longer than request_timeout_ms={timeout_ms}", headers)
        except Exception as exc:  # noqa: BLE001 - any failure of the user's script becomes an error id
            error_id = uuid.uuid4().hex
            deployment.log.error("run() failed, error id %s", error_id, exc_info=exc)
            payload = json.dumps({"error": f"score.py run() raised {type(exc).__name__}: {exc}",
                                  "error_id": error_id}).encode()
            if at_endpoint:
                headers += [(MODEL_STATUS_KEY, b"500"),
                            (MODEL_REASON_KEY, f"{type(exc).__name__}; error id {error_id}".encode())]
                return Answer(424, payload, headers, model_status="500")
            return Answer(500, payload, headers)
        finally:
            self.in_flight -= 1
        if hasattr(result, "status_code"):  # AMLResponse
            message = result.message
            media = JSON_TYPE if getattr(result, "json_str", False) else b"text/plain; charset=utf-8"
            text = message if isinstance(message, str) else json.dumps(message)
            status = model_status = int(result.status_code)
            if at_endpoint and status != 200:  # as Azure: any non-200 of score.py is a 424 at the scoring URI
                reason = text[:200].replace("\n", " ").encode("latin-1", "replace")
                headers += [(MODEL_STATUS_KEY, str(status).encode()), (MODEL_REASON_KEY, reason)]
                status = 424
            return Answer(status, text.encode(), headers, media, str(model_status) if status == 424 else None)
        return Answer(200, json.dumps(result).encode(), headers)

    def _overran(self, deployment: LoadedDeployment) -> None:
        self.overrun += 1
        deployment.log.warning("run() is still running past its request's 408; %d such call(s) hold a place of "
                               "this worker's admission", self.overrun)

    def _end_overrun(self) -> None:
        self.overrun -= 1

    async def _mirror(self, name: str, champion_name: str, body: bytes, state: EndpointState,
                      primary: asyncio.Future[Answer]) -> None:
        """Score a copy of the request on the shadow deployment; its answer goes to nobody, but is kept beside
        the champion's (the status each had at its deployment, as a rollout compares them) for the rollout's
        comparison (:meth:`Recorder.mirrored`)."""
        deployment = await asyncio.to_thread(self.runtime.deployment, name)
        if deployment is None:
            return
        answer = await self._run(deployment, body, state.request_timeout_ms, at_endpoint=False)
        await asyncio.wait([primary])
        if primary.cancelled() or primary.exception() is not None:
            return
        self.metrics.mirrored(name, champion_name, (primary.result(), answer))
        deployment.log.info("mirrored request scored (status %d; kept beside the champion's answer)", answer.status)


def create_app(load_state: StateLoader) -> ScoringApp:
    """The app of this worker, the endpoint folder from the environment: what a backend's factory, the one uvicorn
    calls in each worker, returns with its own way of reading the endpoint's state."""
    return ScoringApp(Path(os.environ[ENDPOINT_DIR_ENV]), load_state, int(os.environ.get(SCORING_THREADS_ENV, "1")))
