"""What a control plane sends an endpoint's server, the same on every backend that runs mlrunway's server: a
scoring request with the endpoint's key (``online_endpoints.invoke``), and a look at whether it is alive."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from mlrunway import check
from mlrunway.errors import EndpointError

__all__ = ["answers", "request_body", "score"]


def request_body(request_file: str | Path | None, payload: Any) -> bytes:
    """The body of an ``invoke``: the file's bytes, or the payload as JSON; exactly one of them."""
    if (request_file is None) == (payload is None):
        raise check.fail("invoke", "needs exactly one of request_file and payload", "pass one")
    return Path(request_file).read_bytes() if request_file is not None else json.dumps(payload).encode()


def score(endpoint: str, uri: str, key: str, body: bytes, deployment: str | None, timeout_s: float) -> str:
    """POST ``body`` to the scoring URI with ``key`` (to ``deployment`` when named); the answer's body, or an
    EndpointError naming the endpoint and the status."""
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    if deployment:
        headers["azureml-model-deployment"] = deployment
    request = urllib.request.Request(uri, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return str(response.read().decode())
    except urllib.error.HTTPError as exc:
        raise EndpointError(f"endpoint {endpoint}: HTTP {exc.code}: {exc.read().decode(errors='replace')}") from exc


def answers(url: str, timeout_s: float) -> bool:
    """Whether GET ``url`` answers 200 within ``timeout_s``."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    except OSError:
        return False
