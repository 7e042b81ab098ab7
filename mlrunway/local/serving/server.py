"""Run an endpoint's server: ``python -m mlrunway.local.serving.server <endpoint_dir>`` (uvicorn, N workers).

The master binds the port with SO_REUSEPORT (:func:`mlrunway.local.serving.master.listening_socket`) and always
runs uvicorn's multiprocess supervisor, even for one worker: its workers then outlive a killed master and serve
on until a recovered master replaces them.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

import uvicorn
from uvicorn.supervisors import Multiprocess

from mlrunway.local.serving.app import DRAIN_CAP_BYTES, ENDPOINT_DIR_ENV
from mlrunway.local.serving.guard import LIMITS_ENV, Limits
from mlrunway.local.serving.master import listening_socket
from mlrunway.local.serving.state import EndpointState


def main(endpoint_dir: Path) -> None:
    state = EndpointState.load(endpoint_dir)
    os.environ[ENDPOINT_DIR_ENV] = str(endpoint_dir)
    # The workers read their limits from the environment when the protocol's module is imported.
    os.environ[LIMITS_ENV] = Limits(state.max_header_bytes, state.max_headers, state.header_timeout_s,
                                    state.body_timeout_s, DRAIN_CAP_BYTES, state.send_timeout_s).encode()
    from mlrunway.local.serving.guard import GuardedProtocol

    serve(state, GuardedProtocol, listening_socket(state.host, state.port))


def serve(state: EndpointState, protocol: type[asyncio.Protocol] | str, sock: socket.socket) -> None:
    """The endpoint's app in ``state.workers`` uvicorn workers on ``sock``, speaking HTTP through ``protocol``."""
    config = uvicorn.Config("mlrunway.local.serving.app:create_app", factory=True, host=state.host, port=state.port,
                            workers=state.workers, log_level="warning", access_log=False, timeout_graceful_shutdown=10,
                            http=protocol, timeout_keep_alive=5)
    Multiprocess(config, sockets=[sock]).run()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
