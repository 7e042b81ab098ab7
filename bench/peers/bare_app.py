"""Two bare ASGI apps under uvicorn, the rows the endpoint's overhead is measured against:

    MODEL_DIR=<folder with model.onnx> uvicorn --factory bare_app:scoring --workers 2
    uvicorn --factory bare_app:ceiling --workers 2

- ``scoring``: the same scoring work as the endpoint, training/score.py's ``run()`` called inline (JSON ->
  numpy -> ONNX Runtime -> JSON), with no auth, routing, limits or thread;
- ``ceiling``: reads the body and answers a constant: what HTTP alone costs on this machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
JSON = [(b"content-type", b"application/json")]


async def _body(receive: Any) -> bytes:
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


def scoring() -> Any:
    os.environ["AZUREML_MODEL_DIR"] = os.environ["MODEL_DIR"]
    spec = importlib.util.spec_from_file_location("score", REPO / "training" / "score.py")
    assert spec is not None and spec.loader is not None
    score = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(score)
    score.init()

    async def app(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        answer = json.dumps(score.run((await _body(receive)).decode())).encode()
        await send({"type": "http.response.start", "status": 200, "headers": JSON})
        await send({"type": "http.response.body", "body": answer})

    return app


def ceiling() -> Any:
    async def app(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await _body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": JSON})
        await send({"type": "http.response.body", "body": b'{"ok": true}'})

    return app
