"""An endpoint's server on a Ray node: ``python -m mlrunway.ray.server <endpoint folder>``, the long-running Ray job
the endpoint's control plane (:mod:`mlrunway.ray.endpoints`) submits with the endpoint's profile, so that it runs on
a worker node and never in the Airflow process that deployed it.

It binds a free port on the address its node reaches the cluster's head by, records where it serves
(``server.json``: host, port, node, pid, when) for the control plane, and runs the backend-neutral scoring app
(:mod:`mlrunway.serving.app`: key auth compared in constant time for every request, score.py loaded as Azure ML loads
it, the statuses Azure answers) in uvicorn, behind the guard the local endpoint's server uses
(:mod:`mlrunway.serving.guard`: head and body limits, slow clients' timeouts). The endpoint's state lives on the
shared storage (``endpoint.json`` and its generation counter, :mod:`mlrunway.serving.state`): a traffic change or a
new deployment reaches the workers without a restart.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import uvicorn

from mlrunway.serving import app
from mlrunway.serving.app import DRAIN_CAP_BYTES, ENDPOINT_DIR_ENV
from mlrunway.serving.guard import LIMITS_ENV, Limits
from mlrunway.serving.state import EndpointState

__all__ = ["SCORING_PORTS_ENV", "SERVER_FILE", "create_app", "main", "node_address", "scoring_socket"]

SERVER_FILE = "server.json"  # where the server serves, for the control plane
SCORING_PORTS_ENV = "MLRUNWAY_SCORING_PORTS"  # "low-high" on a node: the ports its servers may bind (those published)
SERVER_ENV = "MLRUNWAY_SERVER_JOB"  # the server job's name (mlrunway.ray.endpoints sets it), written beside
NODE_ADDRESS_ENV = "MLRUNWAY_NODE_ADDRESS"  # mlrunway.ray.ranks's: the address Ray knows the server's node by


def node_address() -> str:
    """The address Ray knows this node by (``MLRUNWAY_NODE_ADDRESS``, which the server's actor sets:
    :func:`mlrunway.ray.ranks.keep`), else the one it reaches the cluster's head by (the job's ``RAY_ADDRESS`` names
    the head's GCS): the one other machines reach it by, where the scoring port is meant to be reached."""
    if os.environ.get(NODE_ADDRESS_ENV):
        return os.environ[NODE_ADDRESS_ENV]
    head = os.environ.get("RAY_ADDRESS", "")
    host = urlsplit(head if "://" in head else f"//{head}").hostname or "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # no packet is sent: a route is chosen
        probe.connect((host, 9))
        return str(probe.getsockname()[0])


def scoring_socket(host: str) -> socket.socket:
    """A socket bound on ``host``: the first free port of the node's ``MLRUNWAY_SCORING_PORTS`` range where it sets
    one (the ports its compose file or Kubernetes Service publishes), else any free port."""
    ports = os.environ.get(SCORING_PORTS_ENV, "").strip()
    candidates = [0]
    if ports:
        low, _, high = ports.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise SystemExit(f"{SCORING_PORTS_ENV}={ports!r} is not a range of ports: set it as low-high on the "
                             "node, e.g. 30000-30009") from None
        candidates = list(range(first, last + 1))
    for port in candidates:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            continue
        sock.set_inheritable(True)
        return sock
    raise SystemExit(f"every port of {SCORING_PORTS_ENV}={ports} is taken on this node: widen the range (and what "
                     "publishes it), or serve fewer endpoints per node")


def main(folder: Path) -> None:
    state = EndpointState.load(folder)
    host = node_address()
    sock = scoring_socket(host)
    port = int(sock.getsockname()[1])
    os.environ[ENDPOINT_DIR_ENV] = str(folder)
    # The workers read their limits from the environment when the guard's protocol module is imported.
    os.environ[LIMITS_ENV] = Limits(state.max_header_bytes, state.max_headers, state.header_timeout_s,
                                    state.body_timeout_s, DRAIN_CAP_BYTES, state.send_timeout_s).encode()
    from mlrunway.serving.guard import GuardedProtocol

    config = uvicorn.Config("mlrunway.ray.server:create_app", factory=True, host=host, port=port,
                            workers=state.workers, log_level="warning", access_log=False, timeout_graceful_shutdown=10,
                            http=GuardedProtocol, timeout_keep_alive=5)
    written = folder / f".{SERVER_FILE}.{os.getpid()}"
    written.write_text(json.dumps({"host": host, "port": port, "pid": os.getpid(), "node": socket.gethostname(),
                                   "started": time.time(), "job": os.environ.get(SERVER_ENV, "")}))
    os.replace(written, folder / SERVER_FILE)
    if state.workers > 1:  # uvicorn's supervisor: a worker per process on the one socket, one that dies replaced
        from uvicorn.supervisors.multiprocess import Multiprocess

        Multiprocess(config, sockets=[sock]).run()
    else:
        uvicorn.Server(config).run(sockets=[sock])


def create_app() -> app.ScoringApp:
    """The app factory uvicorn calls in each worker: the scoring app over the state on the shared storage."""
    return app.create_app(EndpointState.load)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
