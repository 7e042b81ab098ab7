"""Hostile clients against the local endpoint on 127.0.0.1 (2 workers, the example model as `blue`), and against
a Ray endpoint: tests/contract/test_on_ray.py collects these tests over its own ``endpoint`` fixture (the same
endpoint, served by a Ray job on the test cluster's worker node).

Generated (:mod:`tests.chaos.fuzz`, Hypothesis, derandomized: the same cases every run; bounded in the suite,
``make fuzz-long`` for thousands): bodies of every kind (JSON of any shape and type, number literals, wrong shapes
and values, raw bytes, images valid, foreign, declared too large, cut or changed), heads of any valid fields
around and past the head limits (in one write or in pieces), pipelined requests ending in junk or an oversize
head, and slow clients that stop anywhere in a request. Each case gets the status class it must (a valid request
200 with its predictions, a client's error 4xx, never a 5xx nor a 424 whose model status is 5xx), no connection
is held past its timeout, and a valid request is answered 200 after every case. Each test records how many cases
of each kind it generated and how they were answered (the terminal summary prints them; the long profile writes
tests/chaos/results/fuzz.json).

The catalogue (the first two tests) pins the regressions each class was found by, while valid traffic flows:
at ``/score`` a bad request is score.py's 400, answered as Azure does: 424 with
``ms-azureml-model-error-statuscode: 400``; at ``/deployments/blue/score`` the 400 itself. Limits the server
enforces before the app (head size and count, head and body timeouts, a declared body too large) answer 431,
408 or 413 before the key is even read.
"""

from __future__ import annotations

import base64
import collections
import collections.abc
import concurrent.futures
import contextlib
import http.client
import io
import json
import os
import socket
import struct
import threading
import time

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from mlrunway.backend.types import DeploymentSettings, EndpointSettings
from mlrunway.local.registry import LocalModels
from mlrunway.local.serving.endpoints import LocalEndpoints
from mlrunway.serving.guard import HEAD_SLICE
from tests.chaos import fuzz
from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.chaos]
TIMEOUT_S = 1.0  # the endpoint's head, body and send timeouts in this test


def _png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("L", (width, height)).save(buffer, "PNG")
    return buffer.getvalue()


GOOD = _png(8, 8)
CORRUPT = bytearray(GOOD)
CORRUPT[GOOD.index(b"IDAT") + 6] ^= 0xFF
BOMB = b"\x89PNG\r\n\x1a\n" + fuzz.png_chunk(b"IHDR", struct.pack(">IIBBBBB", 100_000, 100_000, 8, 0, 0, 0, 0)) + \
    fuzz.png_chunk(b"IEND", b"")
EPS = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n"


def images(*files: bytes) -> bytes:
    return json.dumps({"images": [base64.b64encode(bytes(f)).decode() for f in files]}).encode()


BAD_BODIES = {  # each a client's mistake or attack: score.py's 400
    "nested 10,000 deep": b'{"data": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",
    "1e400": b'{"data": [[[[1e400]]]]}',
    "a 5,000-digit integer": b'{"data": [[[[' + b"9" * 5000 + b"]]]]}",
    "numeric strings": json.dumps({"data": [[[["0.5"] * 8] * 8]]}).encode(),
    "booleans": json.dumps({"data": [[[[True] * 8] * 8]]}).encode(),
    "a PNG header claiming 100000x100000": images(BOMB),
    "a truncated PNG": images(GOOD[: len(GOOD) // 2]),
    "a corrupted IDAT": images(CORRUPT),
    "an EPS file": images(EPS),
    "a 2000x2000 PNG": images(_png(2000, 2000)),
    "not JSON": b"{",
    # Issue 27, 7: a scalar or an object where the array goes was a TypeError in score.py, a 500 counted against
    # the deployment: a client with a key could force a challenger's rollback by aiming these at it.
    "a number as data": b'{"data": 3.0}',
    "a string as data": b'{"data": "x"}',
    "null as data": b'{"data": null}',
    "an object as data": b'{"data": {"a": 1}}',
    # Issue 31 (found by the generated bodies): values near float32's limits overflow the model, and the answer was
    # a 200 whose probabilities were NaN, which is no JSON a client can read.
    "1e38 in every pixel": json.dumps({"data": [[[[1e38] * 8] * 8]]}).encode(),
    "a list as the body": b"[1, 2]",
    # Issue 31: numpy reads a boolean among numbers as 1.0, and the request was scored though booleans are refused.
    "one boolean among numbers": json.dumps({"data": [[[[0.5] * 7 + [True]] * 8]]}).encode(),
    "a number as images": b'{"images": 3}',
}


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory, onnx_model):
    from mlrunway.local.workspace import Workspace

    workspace = Workspace.at(tmp_path_factory.mktemp("fuzz") / "ws")
    endpoints = LocalEndpoints(workspace)
    endpoints.create_or_update("fuzz", EndpointSettings(workers=2), header_timeout_s=TIMEOUT_S,
                               body_timeout_s=TIMEOUT_S, send_timeout_s=TIMEOUT_S)
    model = LocalModels(workspace).register("digits", onnx_model)
    endpoints.create_or_update_deployment("fuzz", "blue", DeploymentSettings(
        model=f"digits:{model.version}", code_dir=str(REPO / "training")))
    endpoints.set_traffic("fuzz", {"blue": 100})
    yield endpoints, endpoints.state("fuzz")
    endpoints.delete("fuzz")


def post(state, path: str, body: bytes, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection(state.host, state.port, timeout=10)
    connection.request("POST", path, body, {"Authorization": f"Bearer {state.keys['primary']}",
                                            "Content-Type": "application/json", **(headers or {})})
    response = connection.getresponse()
    response.body = response.read()
    connection.close()
    return response


def raw(state, data: bytes, wait_s: float = 5.0) -> tuple[int | None, float]:
    """Send ``data`` as it is; the status of what comes back (None: nothing) and how long it took."""
    started = time.monotonic()
    with socket.create_connection((state.host, state.port), timeout=wait_s) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = b""
        try:
            while b"\r\n" not in answer and (part := sock.recv(4096)):
                answer += part
        except (TimeoutError, ConnectionResetError):
            pass
    return (int(answer.split()[1]) if answer.startswith(b"HTTP/1.1 ") else None), time.monotonic() - started


def head(state, extra: bytes = b"", length: int = 0) -> bytes:
    return (b"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + state.keys["primary"].encode() +
            b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % length + extra + b"\r\n")


def workers(state) -> set[int]:
    return {child.pid for child in psutil.Process(state.pid).children()}


def test_every_hostile_class_gets_its_status_while_valid_traffic_flows(endpoint, digits):
    endpoints, state = endpoint
    before = workers(state)
    valid = json.dumps({"data": [[[[0.0] * 8] * 8]]}).encode()
    served: list[tuple[int, float]] = []
    stop = threading.Event()

    def steady() -> None:  # valid traffic through the whole test, bounded: at most 60 s
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline:
            started = time.monotonic()
            served.append((post(state, "/score", valid).status, time.monotonic() - started))
            time.sleep(0.02)

    client = threading.Thread(target=steady)
    client.start()
    try:
        for name, body in BAD_BODIES.items():
            at_endpoint = post(state, "/score", body)
            assert (at_endpoint.status, at_endpoint.getheader("ms-azureml-model-error-statuscode")) == (424, "400"), name
            direct = post(state, "/deployments/blue/score", body)
            message = json.loads(direct.body)["error"]
            assert direct.status == 400 and " at 0x" not in message and len(message) < 500, (name, message)

        status, took = raw(state, head(state, b"X-Big: " + b"a" * (64 * 1024 * 1024) + b"\r\n"))
        assert status == 431 and took < 3, ("a 64 MB header value", status, took)
        status, took = raw(state, head(state, b"".join(b"X-%d: 1\r\n" % i for i in range(100_000))))
        assert status == 431 and took < 3, ("100,000 headers", status, took)
        for size in (33, 40, 100):  # issue 27, 6: a head over the limit that arrives in one read
            status, took = raw(state, head(state, b"X-Big: " + b"a" * (size * 1024) + b"\r\n"))
            assert status == 431 and took < 3, (f"a {size} KB head in one read", status, took)
        status, took = raw(state, b"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: ")
        assert status == 408 and TIMEOUT_S * 0.8 < took < TIMEOUT_S + 2, ("half a head", status, took)
        status, took = raw(state, head(state, length=100) + b'{"data": ')
        assert status == 408 and TIMEOUT_S * 0.8 < took < TIMEOUT_S + 2, ("half a body", status, took)
        status, took = raw(state, head(state, length=200 * 1024 * 1024))
        assert status == 413 and took < 1, ("a declared 200 MB body", status, took)
        status, _ = raw(state, b"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
        assert status == 400, ("a bad chunk size", status)
        assert post(state, "/score/", valid).status == 404  # no redirect built from the client's Host header
        assert post(state, "/score", valid, {"azureml-model-deployment": "blue  "}).status == 200
        assert post(state, "/score", valid, {"Authorization": "Bearer wrong"}).status == 401
    finally:
        stop.set()
        client.join()

    assert len(served) > 20 and {status for status, _ in served} == {200}
    assert max(took for _, took in served) < 3.0, sorted(took for _, took in served)[-5:]
    assert workers(state) == before  # no worker crashed or was replaced
    ready = http.client.HTTPConnection(state.host, state.port, timeout=5)
    ready.request("GET", "/healthz/ready")
    assert ready.getresponse().status == 200
    log = endpoints.server_log("fuzz", lines=1_000_000)
    assert "Traceback" not in log and "ClientDisconnect" not in log


def test_a_thousand_pipelined_requests_on_one_connection_are_all_answered(endpoint):
    """Issue 27, 6: each request's head is counted on its own, not the read that carries many of them (before:
    one 431 and no answers)."""
    _, state = endpoint
    body = json.dumps({"data": [[[[0.0] * 8] * 8]]}).encode()
    requests = 1000
    with socket.create_connection((state.host, state.port), timeout=30) as sock:
        # Sent from another thread while this one reads: a client that only writes would stall on full buffers.
        sender = threading.Thread(target=sock.sendall, args=((head(state, length=len(body)) + body) * requests,))
        sender.start()
        answers, received = b"", 0
        while received < requests and (part := sock.recv(65536)):
            answers += part
            received = answers.count(b"HTTP/1.1 ")
        sender.join(30)
    statuses = [int(line.split()[1]) for line in answers.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]
    assert len(statuses) == requests and set(statuses) == {200}, (len(statuses), set(statuses))


def test_a_refusal_on_a_pipelined_connection_follows_the_answers_before_it(endpoint):
    """Issue 31 (found by the generated pipelines): requests followed in the same write by junk or by a head over
    the limit are answered, in order, and the refusal comes after them (before: the refusal alone, the answer of
    the request that ran dropped and those queued behind it never sent)."""
    _, state = endpoint
    body = json.dumps({"data": [[[[0.0] * 8] * 8]]}).encode()
    for trailer, refusal in ((b"\x00junk", 400), (head(state, b"X-Big: " + b"a" * (40 * 1024) + b"\r\n"), 431)):
        with socket.create_connection((state.host, state.port), timeout=10) as sock:
            sock.sendall((head(state, length=len(body)) + body) * 3 + trailer)
            answers = b""
            while part := sock.recv(65536):
                answers += part
        statuses = [int(line.split()[1]) for line in answers.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]
        assert statuses == [200, 200, 200, refusal], (trailer[:8], statuses)


def test_a_client_that_never_reads_its_answers_is_dropped_after_the_send_timeout(endpoint):
    """Issue 31: a client that pipelined requests and read none of the answers held its connection for good (the
    server's writes blocked on full buffers, and no timeout covered them). Each answer here is a 404 of about 16 KB
    (it names its path); the socket's receive buffer is small, so the server's writes block within milliseconds."""
    _, state = endpoint
    request = f"GET /{'x' * 16_000} HTTP/1.1\r\nHost: endpoint\r\n\r\n".encode()
    count = 400  # about 6.4 MB of answers, more than every buffer between the server and this socket holds
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((state.host, state.port))

    def send() -> None:
        with contextlib.suppress(OSError):  # the server drops the connection while this is still sending
            sock.sendall(request * count)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    time.sleep(TIMEOUT_S + SLACK_S)  # the writes block, then the send timeout passes: the server drops us
    sock.settimeout(KEEP_ALIVE_S)
    answers, ended = b"", False
    try:
        while part := sock.recv(65536):
            answers += part
        ended = True
    except ConnectionResetError:
        ended = True
    except TimeoutError:
        pass
    finally:
        sock.close()
    sender.join(10)
    answered = answers.count(b"HTTP/1.1 404")
    assert ended and answered < count, (ended, answered)
    assert_alive(state)


# -- generated ------------------------------------------------------------------------------------------------------
KEEP_ALIVE_S = 5.0  # uvicorn's timeout_keep_alive (server.py): how long a connection may idle between requests
SLACK_S = 2.0  # past a timeout, how late its close may come on a busy 2-core machine
# The long profile's counts (make fuzz-long FUZZ_BACKEND=ray names fuzz-ray.json: the Ray endpoint's).
RESULTS = REPO / "tests" / "chaos" / "results" / os.environ.get("MLRUNWAY_FUZZ_RESULTS_FILE", "fuzz.json")
VALID = json.dumps({"data": [[[[0.0] * 8] * 8]]}).encode()
JUNK = st.builds(bytes.__add__, st.sampled_from([  # each a request the parser refuses at once: 400
    b"\x00", b"\x16\x03\x01\x02\x00",  # no method; a TLS handshake
    b"POST /score HTTP/1.1\r\nX-No-Colon\r\n\r\n", b"POST /score HTTP/1.1\r\nContent-Length: 1x\r\n\r\n"]),
    st.binary(max_size=100))


@pytest.fixture(scope="module")
def model(onnx_model) -> tuple[tuple[int, ...], int]:
    """The model's input shape (without the batch axis) and its number of classes."""
    signature = json.loads((onnx_model / "signature.json").read_text())
    return tuple(signature["inputs"][0]["shape"][1:]), len(signature["classes"])


def fields(state, key: str = "right") -> list[tuple[bytes, bytes]]:
    """A scoring request's fields: with the endpoint's key, a wrong one, or none."""
    given_key = {"right": [state.keys["primary"].encode()], "wrong": [b"wrong"], "none": []}[key]
    return [(b"Host", b"127.0.0.1"), *((b"Authorization", b"Bearer " + k) for k in given_key),
            (b"Content-Type", b"application/json")]


def path_for(at_endpoint: bool) -> str:
    return "/score" if at_endpoint else "/deployments/blue/score"


def not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


def judge(case: fuzz.Case, response: fuzz.Response, at_endpoint: bool, classes: int, max_body_bytes: int) -> str:
    """Assert that ``response`` is one ``case`` may get; return its status as the tally counts it (``424/400``)."""
    status, model_status = response.status, response.headers.get("ms-azureml-model-error-statuscode")
    seen = f"424/{model_status}" if status == 424 else str(status)
    context = (case.kind, case.expect, case.body[:300], seen, response.body[:300])
    assert status < 500 and int(model_status or 0) < 500, context
    if len(case.body) > max_body_bytes:
        assert status == 413, context
    elif status == 200:
        assert case.expect != fuzz.REFUSED, context
        predictions = json.loads(response.body, parse_constant=not_json)["predictions"]
        assert case.inputs is None or len(predictions) == case.inputs, context
        assert all(len(prediction["probabilities"]) == classes for prediction in predictions), context
    else:
        assert case.expect != fuzz.OK and seen == ("424/400" if at_endpoint else "400"), context
        message = json.loads(response.body)["error"]
        assert " at 0x" not in message and len(message) <= 500, (context, message)
    return seen


def assert_alive(state) -> None:
    """A valid request is answered 200, at once."""
    answer = fuzz.exchange(state.host, state.port, [fuzz.request("/score", VALID, [*fields(state),
                                                                                    (b"Connection", b"close")])])
    assert answer.statuses == [200] and answer.closed_after_s is not None and answer.closed_after_s < 3, answer


class Tally:
    """One test's generated cases: how many of each kind, and how each kind was answered."""

    def __init__(self) -> None:
        self.answers: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self.started = time.monotonic()

    def add(self, kind: str, answer: str) -> None:
        self.answers[kind][answer] += 1

    @property
    def cases(self) -> int:
        return sum(sum(counts.values()) for counts in self.answers.values())

    def __str__(self) -> str:
        kinds = "; ".join(f"{kind} {sum(counts.values())} ({', '.join(f'{a} x{n}' for a, n in sorted(counts.items()))})"
                          for kind, counts in sorted(self.answers.items()))
        return f"{self.cases} generated cases ({fuzz.PROFILE}) in {time.monotonic() - self.started:.1f} s: {kinds}"


@contextlib.contextmanager
def tallied(name: str, record_property) -> collections.abc.Iterator[Tally]:
    """Record the test's tally, passed or failed: a property the terminal summary prints (tests/chaos/conftest.py),
    and in the long profile an entry of tests/chaos/results/fuzz.json."""
    tally = Tally()
    try:
        yield tally
    finally:
        record_property("fuzz", str(tally))
        if fuzz.PROFILE == "fuzz-long":
            fuzz.record(RESULTS, name, tally.answers, time.monotonic() - tally.started)



def test_generated_bodies_get_their_status_class(endpoint, model, record_property):
    """Each body, at the scoring URI or at the deployment's own: a valid one 200 with a prediction per input, a
    client's error score.py's 400 (424/400 at the scoring URI), never a 5xx; then a valid request still 200."""
    _, state = endpoint
    shape, classes = model
    with tallied("bodies", record_property) as tally:
        @fuzz.fuzz_settings(1.0)
        @given(case=fuzz.bodies(shape), at_endpoint=st.booleans())
        def one(case: fuzz.Case, at_endpoint: bool) -> None:
            answer = fuzz.exchange(state.host, state.port, [fuzz.request(
                path_for(at_endpoint), case.body, [*fields(state), (b"Connection", b"close")])])
            assert len(answer.responses) == 1 and not answer.rest and answer.closed_after_s is not None, answer
            tally.add(case.kind, judge(case, answer.responses[0], at_endpoint, classes, state.max_body_bytes))
            assert_alive(state)

        one()
    assert set(tally.answers) == {"valid data", "large values", "number literals", "wrong shapes", "wrong values",
                                  "wrong structures", "any JSON", "raw bytes", "images"}, tally
    assert {"200", "424/400", "400"} <= {a for counts in tally.answers.values() for a in counts}, tally


def test_generated_heads_are_served_or_refused_by_size_and_count(endpoint, record_property):
    """A head within both limits is served (or 401 without the key: the limits come first); past either, 431 at
    once, however it arrives: whole in one write (issue 31: 33 to 100 KB in one read) or in pieces. The size is
    counted in slices that end a byte past the limit, so only a head exactly one byte over may go either way (it
    went either way up to a whole HEAD_SLICE over, 1 KiB, before issue 59)."""
    _, state = endpoint

    def case(tally: Tally, fields_: list[tuple[bytes, bytes]], size: int, key: str, cut) -> None:
        wire = fuzz.padded("/score", VALID, [*fields(state, key), *fields_, (b"Connection", b"close")], size)
        size, count = wire.index(b"\r\n\r\n") + 4, wire[:wire.index(b"\r\n\r\n")].count(b"\r\n")
        writes = cut(wire)
        served = 200 if key == "right" else 401
        if count > state.max_headers:
            band, allowed = "over the field count", {431}
        elif size > state.max_header_bytes + 1:
            band, allowed = "over the size", {431}
        elif size > state.max_header_bytes:
            band, allowed = "a byte over the size", {served, 431}
        else:
            band, allowed = "within the limits", {served}
        answer = fuzz.exchange(state.host, state.port, writes)
        context = (band, size, count, len(writes), answer)
        assert len(answer.statuses) == 1 and answer.statuses[0] in allowed and not answer.rest, context
        assert answer.closed_after_s is not None and answer.closed_after_s < 3, context
        tally.add(f"{band}, {'one write' if len(writes) == 1 else 'in pieces'}", str(answer.statuses[0]))
        assert_alive(state)

    with tallied("heads", record_property) as tally:
        @fuzz.fuzz_settings(0.5)
        @given(generated=fuzz.header_sets(state.max_header_bytes, HEAD_SLICE),
               key=st.sampled_from(["right", "wrong", "none"]), data=st.data())
        def one(generated: tuple[list[tuple[bytes, bytes]], int], key: str, data: st.DataObject) -> None:
            case(tally, generated[0], generated[1], key, lambda wire: fuzz.pieces(data.draw, wire))

        one()
        # Each band in each way it can arrive, whatever the generator drew (one write over the size is a few of
        # its cases at most): the generated cases, then one fixed case of each.
        fixed = {"within the limits": ([], 0), "over the size": ([], state.max_header_bytes + 4 * HEAD_SLICE),
                 "over the field count": ([(b"X-F%d" % i, b"v") for i in range(state.max_headers + 5)], 0)}
        # The limit exactly (served) and two bytes past it (431): a limit, not a slice more.
        edges = [([], state.max_header_bytes), ([], state.max_header_bytes + 2)]
        for fields_, size in [*fixed.values(), *edges]:
            case(tally, fields_, size, "right", lambda wire: [wire])
            case(tally, fields_, size, "right", lambda wire: [wire[:len(wire) // 2], wire[len(wire) // 2:]])
    for band in ("within the limits", "over the size", "over the field count"):
        assert {f"{band}, one write", f"{band}, in pieces"} <= set(tally.answers), tally


def test_generated_pipelines_are_answered_in_order(endpoint, model, record_property):
    """Up to 8 requests in one connection's writes (valid and bad alike), perhaps followed by junk or a head over
    the limit: every request before it is answered, in order, then the junk 400 or the head 431."""
    _, state = endpoint
    shape, classes = model
    requests = st.one_of(fuzz.valid_data(shape, max_batch=2), fuzz.wrong_shapes(shape), fuzz.wrong_structures(),
                         fuzz.raw_bodies(shape))
    oversize = st.integers(state.max_header_bytes + HEAD_SLICE, 100 * 1024).map(
        lambda size: fuzz.request("/score", VALID, [*fields(state), (b"X-Pad", b"p" * size)]))
    with tallied("pipelines", record_property) as tally:
        @fuzz.fuzz_settings(0.25)
        @given(cases=st.lists(st.tuples(requests, st.booleans()), min_size=1, max_size=8),
               trailer=st.none() | st.tuples(st.just("junk"), JUNK) | st.tuples(st.just("oversize head"), oversize),
               data=st.data())
        def one(cases: list[tuple[fuzz.Case, bool]], trailer: tuple[str, bytes] | None, data: st.DataObject) -> None:
            closing = [] if trailer else [(b"Connection", b"close")]  # without a trailer, the last request closes
            wire = b"".join(fuzz.request(path_for(at_endpoint), case.body, fields(state) + (closing if i == len(cases) - 1 else []))
                            for i, (case, at_endpoint) in enumerate(cases)) + (trailer[1] if trailer else b"")
            answer = fuzz.exchange(state.host, state.port, fuzz.pieces(data.draw, wire))
            context = (len(cases), trailer and trailer[0], answer.statuses, answer.rest[:200])
            assert len(answer.responses) == len(cases) + (trailer is not None) and not answer.rest, context
            assert answer.closed_after_s is not None and answer.closed_after_s < 3, context
            for (case, at_endpoint), response in zip(cases, answer.responses, strict=False):
                judge(case, response, at_endpoint, classes, state.max_body_bytes)
            if trailer is not None:
                assert answer.statuses[-1] == {"junk": 400, "oversize head": 431}[trailer[0]], context
            tally.add(f"{len(cases)} request(s), then {trailer[0] if trailer else 'close'}",
                      " ".join(map(str, answer.statuses)))
            assert_alive(state)

        one()
    endings = {kind.split(", then ")[1] for kind in tally.answers}
    assert endings == {"close", "junk", "oversize head"}, tally


def test_generated_slow_clients_are_closed_within_their_timeout(endpoint, record_property):
    """Connections that stop anywhere in a request (even before its first byte), all at once: each is answered
    408 and closed within the head or body timeout; one that stops in its second request, after the first was
    answered, within the keep-alive time."""
    _, state = endpoint
    wire = fuzz.request("/score", VALID, fields(state))
    with tallied("slow clients", record_property) as tally:
        @fuzz.fuzz_settings(0.01)
        @given(cuts=st.lists(st.tuples(st.booleans(), st.integers(0, len(wire) - 1)), min_size=1, max_size=6))
        def one(cuts: list[tuple[bool, int]]) -> None:
            writes = [[wire, wire[:cut]] if second else [wire[:cut]] for second, cut in cuts]
            with concurrent.futures.ThreadPoolExecutor(len(writes)) as pool:
                answers = list(pool.map(lambda w: fuzz.exchange(state.host, state.port, w, wait_s=15), writes))
            for (second, cut), answer in zip(cuts, answers, strict=False):
                took, context = answer.closed_after_s, (second, cut, answer)
                if second:
                    assert answer.statuses in ([200], [200, 408]), context
                    assert took is not None and took < max(TIMEOUT_S, KEEP_ALIVE_S) + SLACK_S, context
                else:
                    assert answer.statuses == [408], context
                    assert took is not None and TIMEOUT_S * 0.8 < took < TIMEOUT_S + SLACK_S, context
                where = "nothing" if cut == 0 else "in the head" if cut < wire.index(b"\r\n\r\n") + 4 else "in the body"
                tally.add(f"{'after a request, ' if second else ''}stopped {where}", " ".join(map(str, answer.statuses)))
            assert_alive(state)

        one()
    assert {"stopped in the head", "stopped in the body"} <= set(tally.answers), tally
