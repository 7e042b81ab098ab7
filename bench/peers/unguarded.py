"""The endpoint's own app on one of uvicorn's HTTP protocols, without the limits: what the limits cost.

    python bench/peers/unguarded.py <endpoint folder> <httptools|h11> <port>

It serves an existing local endpoint's folder (its deployments, traffic and keys: the same app, auth, routing and
metrics) on another port, with uvicorn's own protocol in place of the guarded one (``guard.py``). Built here, by
the benchmark, so that nothing in ``mlrunway/`` can switch the guard off.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mlrunway.local.serving.master import listening_sockets
from mlrunway.local.serving.server import serve
from mlrunway.local.serving.state import EndpointState
from mlrunway.serving.app import ENDPOINT_DIR_ENV


def main(endpoint_dir: Path, protocol: str, port: int) -> None:
    if protocol not in ("httptools", "h11"):
        raise SystemExit(f"protocol: {protocol!r} is not one of uvicorn's (httptools, h11)")
    os.environ[ENDPOINT_DIR_ENV] = str(endpoint_dir)
    state = EndpointState.load(endpoint_dir)
    serve(state, protocol, listening_sockets("127.0.0.1", port, state.workers))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
