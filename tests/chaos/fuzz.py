"""Generated requests for the endpoint's fuzz test (:mod:`tests.chaos.test_endpoint_fuzz`): Hypothesis strategies
for bodies (JSON of every shape, raw bytes, images), header sets, pipelined requests and slow clients, and the
raw-socket exchange that sends one and reads back every answer.

Each body case carries what the endpoint promises for it (docs/explanation/export-and-serving.md): :data:`OK`, a prediction per
input; :data:`REFUSED`, score.py's 400 (a 424 carrying it at ``/score``); :data:`EITHER`, one of the two, where the
input's class is not fixed by construction (random JSON, a mutated image), so that only the status classes are
checked. Two Hypothesis profiles, both derandomized (the same cases on every run): ``fuzz-suite``, bounded for the
test suite, and ``fuzz-long`` with ``MLRUNWAY_FUZZ_EXAMPLES`` examples (``make fuzz-long``).
"""

from __future__ import annotations

import base64
import io
import json
import math
import socket
import string
import struct
import subprocess
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from PIL import Image

from tests.profiles import suite_and_long

EXAMPLES_ENV = "MLRUNWAY_FUZZ_EXAMPLES"
PROFILE = suite_and_long("fuzz", suite=400, long=5000, env=EXAMPLES_ENV,
                         suppress=[HealthCheck.too_slow, HealthCheck.data_too_large])


def fuzz_settings(share: float) -> settings:
    """The profile's settings for a test that runs ``share`` of its examples (the costlier its cases, the fewer)."""
    profile = settings.get_profile(PROFILE)
    return settings(profile, max_examples=max(1, math.ceil(profile.max_examples * share)))


OK, REFUSED, EITHER = "ok", "refused", "either"


@dataclass(frozen=True)
class Case:
    """A request body, the strategy that made it (``kind``), and what it must be answered."""

    kind: str
    body: bytes
    expect: str
    inputs: int | None = None  # the predictions an answer of 200 holds (None: not known)


def combined(expects: list[str]) -> str:
    """A request of several parts: refused if any part is, else decided only when every part is."""
    return REFUSED if REFUSED in expects else EITHER if EITHER in expects else OK


# -- JSON bodies ---------------------------------------------------------------------------------------------------
# Valid data's values: a preprocessed image's are a few units; near float32's limits the model's output overflows,
# which score.py refuses (400), so that only values within SAFE are sure to be scored.
SAFE = 10**6
NUMBERS = st.one_of(st.floats(-SAFE, SAFE, width=32), st.integers(-SAFE, SAFE))
LARGE_NUMBERS = st.one_of(st.floats(width=32, allow_nan=False, allow_infinity=False), st.integers(-(2**63), 2**64 - 1))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) |
    st.dictionaries(st.sampled_from(["data", "images"]) | st.text(max_size=10), children, max_size=4),
    max_leaves=30)


def nest(flat: list[Any], shape: list[int]) -> Any:
    """``flat`` as nested lists of ``shape`` (row-major)."""
    if len(shape) == 1:
        return list(flat)
    step = len(flat) // shape[0] if shape[0] else 0
    return [nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def filled(size: int, numbers: st.SearchStrategy[Any] = NUMBERS) -> st.SearchStrategy[list[Any]]:
    """``size`` numbers: all one value, or each its own."""
    return st.one_of(numbers.map(lambda value: [value] * size), st.lists(numbers, min_size=size, max_size=size))


@st.composite
def dumped(draw: st.DrawFn, value: Any) -> bytes:
    """``value`` as JSON text, laid out one of the ways a client may write it."""
    indent = draw(st.sampled_from([None, 0, 2]))
    separators = draw(st.sampled_from([None, (",", ":"), (" , ", " : ")]))
    return json.dumps(value, indent=indent, separators=separators, ensure_ascii=draw(st.booleans())).encode()


def extra_keys() -> st.SearchStrategy[dict[str, Any]]:
    """Keys score.py does not read, beside ``data``: ignored."""
    return st.dictionaries(st.text(max_size=12).filter(lambda key: key not in ("data", "images")), JSON, max_size=3)


@st.composite
def valid_data(draw: st.DrawFn, shape: tuple[int, ...], max_batch: int = 4, large: bool = False) -> Case:
    """A batch of 1 to ``max_batch`` inputs of the model's shape (or one without its batch axis), and perhaps keys
    beside ``data``; its values within :data:`SAFE`, or (``large``) anywhere in float32's range and int64's and
    uint64's, which the model's output may not survive."""
    batch = draw(st.integers(1, max_batch))
    data = nest(draw(filled(batch * math.prod(shape), LARGE_NUMBERS if large else NUMBERS)), [batch, *shape])
    if batch == 1 and draw(st.booleans()):
        data = data[0]
    body = draw(dumped({"data": data, **draw(extra_keys())}))
    return Case("large values", body, EITHER, batch) if large else Case("valid data", body, OK, batch)


LITERAL = r"-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,4})?"


def literal_expect(text: str) -> str:
    """What score.py makes of an input whose every number is written ``text``: integers from int64's least to
    uint64's greatest and floats finite in float32 are inputs (scored if within :data:`SAFE`); anything else (a
    number out of range, or one of more digits than Python converts) is refused."""
    try:
        value = json.loads(text)
    except ValueError:
        return REFUSED
    with np.errstate(over="ignore"):
        number = -(2**63) <= value < 2**64 if isinstance(value, int) else np.isfinite(np.float32(value))
    return (OK if abs(value) <= SAFE else EITHER) if number else REFUSED


@st.composite
def number_literals(draw: st.DrawFn, shape: tuple[int, ...]) -> Case:
    """One input, every value the same JSON number literal: long, huge, tiny, or with thousands of digits."""
    text = draw(st.one_of(st.from_regex(LITERAL, fullmatch=True),
                          st.integers(300, 6000).map(lambda digits: "9" * digits),
                          st.sampled_from(["1e38", "3.4028235e38", "3.5e38", "1e39", "-1e400", "1e-400", "-0",
                                           "9223372036854775807", "18446744073709551615", "18446744073709551616"])))
    body = b'{"data": ' + json.dumps(nest([0] * math.prod(shape), [1, *shape])).replace("0", text).encode() + b"}"
    return Case("number literals", body, literal_expect(text), 1)


@st.composite
def wrong_shapes(draw: st.DrawFn, shape: tuple[int, ...]) -> Case:
    """Numbers in any shape but the model's (with or without the batch axis), or more inputs than a request may
    hold."""
    if draw(st.booleans()):
        dims = [draw(st.integers(257, 300)), *shape]
    else:
        dims = draw(st.lists(st.integers(0, 12), min_size=1, max_size=6).filter(
            lambda d: math.prod(d) <= 5000 and d != list(shape) and
            not (len(d) == len(shape) + 1 and d[1:] == list(shape) and d[0] > 0)))
    data = nest([draw(LARGE_NUMBERS)] * math.prod(dims), dims)
    return Case("wrong shapes", draw(dumped({"data": data})), REFUSED)


NOT_NUMBERS = st.one_of(st.text(max_size=10), st.none(), st.dictionaries(st.text(max_size=5), JSON, max_size=2),
                        st.lists(NUMBERS, max_size=3))


@st.composite
def wrong_values(draw: st.DrawFn, shape: tuple[int, ...]) -> Case:
    """The model's shape with one value that is not a number (a boolean among numbers included: numpy would read
    it as 0 or 1)."""
    flat = draw(filled(math.prod(shape), LARGE_NUMBERS))
    flat[draw(st.integers(0, len(flat) - 1))] = draw(NOT_NUMBERS | st.booleans())
    return Case("wrong values", draw(dumped({"data": nest(flat, [1, *shape])})), REFUSED, 1)


@st.composite
def wrong_structures(draw: st.DrawFn) -> Case:
    """Bodies that are JSON but not a request: not an object, no ``data`` or ``images``, ``data`` that is no
    array (a scalar, a string, an object, null), ``data`` nested too deep, ``images`` that is no list of
    strings or holds too many."""
    body = draw(st.one_of(
        JSON.filter(lambda value: not isinstance(value, dict)),
        st.dictionaries(st.text(max_size=10).filter(lambda key: key not in ("data", "images")), JSON, max_size=4),
        st.builds(lambda value: {"data": value}, st.none() | st.booleans() | NUMBERS | st.text(max_size=20) |
                  st.dictionaries(st.text(max_size=5), JSON, max_size=3)),
        st.builds(lambda value: {"images": value}, st.none() | NUMBERS | st.text(max_size=20) | st.just([]) |
                  st.lists(st.none() | NUMBERS | st.lists(st.text(max_size=4), max_size=2), min_size=1, max_size=3) |
                  st.integers(257, 300).map(lambda n: ["x"] * n)),
    ))
    if draw(st.integers(0, 4)) == 0:  # deeper than score.py's 8 levels, up to past the JSON parser's recursion
        depth = draw(st.integers(9, 20_000))
        return Case("wrong structures", b'{"data": ' + b"[" * depth + b"]" * depth + b"}", REFUSED)
    return Case("wrong structures", draw(dumped(body)), REFUSED)


@st.composite
def any_json(draw: st.DrawFn) -> Case:
    """Any JSON value, often under ``data`` or ``images``: only the status class is checked."""
    return Case("any JSON", draw(dumped(draw(JSON))), EITHER)


def refused_unless_object(body: bytes) -> str:
    try:
        return EITHER if isinstance(json.loads(body.decode("utf-8", "replace")), dict) else REFUSED
    except (ValueError, RecursionError):
        return REFUSED


@st.composite
def raw_bodies(draw: st.DrawFn, shape: tuple[int, ...]) -> Case:
    """Bytes that are not a request's JSON: random bytes, a valid body cut short, or one with bytes changed."""
    valid = draw(valid_data(shape, max_batch=1))
    how = draw(st.sampled_from(["random", "cut", "changed"]))
    if how == "random":
        body = draw(st.binary(max_size=2000))
        return Case("raw bytes", body, refused_unless_object(body))
    if how == "cut":
        return Case("raw bytes", valid.body[:draw(st.integers(0, len(valid.body) - 1))], REFUSED)
    changed = bytearray(valid.body)
    for _ in range(draw(st.integers(1, 4))):
        changed[draw(st.integers(0, len(changed) - 1))] = draw(st.integers(0, 255))
    return Case("raw bytes", bytes(changed), EITHER, 1)


# -- images ---------------------------------------------------------------------------------------------------------
SAVE_MODES = {"PNG": ["1", "L", "LA", "P", "RGB", "RGBA", "I;16"], "JPEG": ["L", "RGB", "CMYK"],
              "GIF": ["L"], "BMP": ["RGB"], "TIFF": ["RGB"], "WEBP": ["RGB"], "ICO": ["RGBA"], "PPM": ["RGB"]}
MAX_PIXELS = 1024 * 1024  # score.py's bound for the example model's 8x8 inputs: max(1 MP, 64 times the input)


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


@st.composite
def image_files(draw: st.DrawFn) -> tuple[bytes, str]:
    """An image file and what score.py makes of it: a PNG or JPEG of any mode and size up to 48x48 pixels is an
    input; another format, a PNG header declaring more pixels than the bound, or bytes that are no image are
    refused; a valid file cut short or with bytes changed is not decided."""
    how = draw(st.sampled_from(["image", "image", "other format", "declared too large", "cut", "changed", "bytes"]))
    if how == "declared too large":
        width = draw(st.integers(1, 2**31 - 1))
        height = draw(st.integers(MAX_PIXELS // width + 1, 2**31 - 1))
        header = png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
        return b"\x89PNG\r\n\x1a\n" + header + png_chunk(b"IEND", b""), REFUSED
    if how == "bytes":
        return draw(st.binary(max_size=300)), REFUSED
    fmt = draw(st.sampled_from(["PNG", "JPEG"] if how != "other format" else sorted(set(SAVE_MODES) - {"PNG", "JPEG"})))
    width, height = draw(st.integers(1, 48)), draw(st.integers(1, 48))
    gray = Image.frombytes("L", (width, height), draw(st.binary(min_size=width * height, max_size=width * height)))
    buffer = io.BytesIO()
    gray.convert(draw(st.sampled_from(SAVE_MODES[fmt]))).save(buffer, fmt)
    data = buffer.getvalue()
    if how == "cut":
        return data[:draw(st.integers(0, len(data) - 1))], EITHER
    if how == "changed":
        changed = bytearray(data)
        changed[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
        return bytes(changed), EITHER
    return data, OK if fmt in ("PNG", "JPEG") else REFUSED


@st.composite
def images(draw: st.DrawFn) -> Case:
    """``{"images": [...]}`` of 1 to 3 files, base64 (or, now and then, a string that is not base64)."""
    files = draw(st.lists(image_files(), min_size=1, max_size=3))
    items = [base64.b64encode(data).decode() for data, _ in files]
    expects = [expect for _, expect in files]
    if draw(st.integers(0, 5)) == 0:
        items[draw(st.integers(0, len(items) - 1))] = draw(st.text(min_size=1, max_size=20).filter(
            lambda text: not set(text) <= set(string.ascii_letters + string.digits + "+/=")))
        expects.append(REFUSED)
    return Case("images", draw(dumped({"images": items})), combined(expects), len(items))


def bodies(shape: tuple[int, ...]) -> st.SearchStrategy[Case]:
    """Every kind of body, the model's input ``shape`` (without the batch axis) deciding which data is valid."""
    return st.one_of(valid_data(shape), valid_data(shape, large=True), number_literals(shape), wrong_shapes(shape),
                     wrong_values(shape), wrong_structures(), any_json(), raw_bodies(shape), images())


# -- heads -----------------------------------------------------------------------------------------------------------
TCHAR = string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~"
VALUE_CHARS = "".join(map(chr, [9, *range(0x20, 0x7F), *range(0x80, 0x100)]))  # as RFC 9110 allows (obs-text too)


def request(path: str, body: bytes, fields: list[tuple[bytes, bytes]]) -> bytes:
    """``POST path`` with ``body``, its Content-Length and ``fields``, as bytes on the wire."""
    lines = [b"POST %s HTTP/1.1" % path.encode(), b"Content-Length: %d" % len(body),
             *(name + b": " + value for name, value in fields)]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


@st.composite
def header_sets(draw: st.DrawFn, max_header_bytes: int, slice_bytes: int) -> tuple[list[tuple[bytes, bytes]], int]:
    """A few fields, or around the limit's 100, each of any valid name (``X-`` first, so that none means something
    to the server) and value; and a size to pad the head to, drawn around ``max_header_bytes`` or far past it (to
    100 KiB), or none (0)."""
    count = draw(st.one_of(st.integers(0, 8), st.integers(90, 110)))
    fields = draw(st.lists(st.tuples(st.text(TCHAR, min_size=1, max_size=30).map(lambda t: b"X-" + t.encode()),
                                     st.text(VALUE_CHARS, max_size=60).map(lambda t: t.strip().encode("latin-1"))),
                           min_size=count, max_size=count))
    size = draw(st.one_of(st.just(0), st.integers(0, max_header_bytes),
                          st.integers(max_header_bytes - 2 * slice_bytes, max_header_bytes + 2 * slice_bytes),
                          st.integers(max_header_bytes, 100 * 1024)))
    return fields, size


def padded(path: str, body: bytes, fields: list[tuple[bytes, bytes]], size: int) -> bytes:
    """:func:`request`, its head padded to ``size`` bytes by one more field where it is shorter."""
    wire = request(path, body, fields)
    pad = size - wire.index(b"\r\n\r\n") - 4 - len(b"X-Pad: \r\n")
    return request(path, body, [*fields, (b"X-Pad", b"p" * pad)]) if pad >= 0 else wire


def pieces(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """``data`` in one write, or cut into up to 8 writes."""
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(data) - 1)), max_size=7))))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


# -- the wire --------------------------------------------------------------------------------------------------------
@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes = b""


@dataclass
class Exchange:
    """What came back on one connection: the responses in order, whatever followed them that is no response, and the
    seconds from the last write to the server's close (``None``: still open at the client's timeout)."""

    responses: list[Response] = field(default_factory=list)
    rest: bytes = b""
    closed_after_s: float | None = None

    @property
    def statuses(self) -> list[int]:
        return [response.status for response in self.responses]


def parse(data: bytes) -> tuple[list[Response], bytes]:
    """The HTTP/1.1 responses at the start of ``data`` (a body by Content-Length or chunked), and what is left."""
    responses = []
    while data.startswith(b"HTTP/1.1 ") and (end := data.find(b"\r\n\r\n")) > 0:
        status_line, *lines = data[:end].decode("latin-1").split("\r\n")
        headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
        rest = data[end + 4:]
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while (eol := rest.find(b"\r\n")) > 0 and (size := int(rest[:eol], 16)):
                body, rest = body + rest[eol + 2:eol + 2 + size], rest[eol + 4 + size:]
            if not rest.startswith(b"0\r\n\r\n"):
                break
            rest = rest[5:]
        else:
            size = int(headers.get("content-length", "0"))
            if len(rest) < size:
                break
            body, rest = rest[:size], rest[size:]
        responses.append(Response(int(status_line.split()[1]), headers, body))
        data = rest
    return responses, data


def exchange(host: str, port: int, writes: list[bytes], wait_s: float = 20.0) -> Exchange:
    """Send ``writes``, each a write of its own, from a thread while this one reads until the server closes (a
    client that only writes would stall on full buffers when the server answers early)."""
    done: list[float] = []
    with socket.create_connection((host, port), timeout=wait_s) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def send() -> None:
            try:
                for data in writes:
                    sock.sendall(data)
            except OSError:  # refused and closed: what the server answered is read all the same
                pass
            done.append(time.monotonic())

        sender = threading.Thread(target=send)
        sender.start()
        received, closed = b"", None
        try:
            while part := sock.recv(65536):
                received += part
            closed = time.monotonic()
        except ConnectionResetError:
            closed = time.monotonic()
        except TimeoutError:
            pass
        sender.join(wait_s)
    responses, rest = parse(received)
    return Exchange(responses, rest, None if closed is None else closed - (done[0] if done else closed))


def record(path: Path, test: str, answers: dict[str, Any], seconds: float) -> None:
    """Put one test's tally (kind: answer: count) into the results file, beside the other tests' of the run."""
    results = json.loads(path.read_text()) if path.exists() else {}
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    results.update(profile=PROFILE, max_examples=settings.get_profile(PROFILE).max_examples, commit=commit)
    results.setdefault("tests", {})[test] = {
        "cases": sum(sum(counts.values()) for counts in answers.values()), "seconds": round(seconds, 1),
        "answers": {kind: dict(sorted(counts.items())) for kind, counts in sorted(answers.items())}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n")
