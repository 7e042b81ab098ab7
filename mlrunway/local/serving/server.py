"""Run an endpoint's server: ``python -m mlrunway.local.serving.server <endpoint_dir>`` (uvicorn, N workers)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import uvicorn

from mlrunway.local.serving.app import ENDPOINT_DIR_ENV
from mlrunway.local.serving.state import EndpointState


def main(endpoint_dir: Path) -> None:
    state = EndpointState.load(endpoint_dir)
    os.environ[ENDPOINT_DIR_ENV] = str(endpoint_dir)
    uvicorn.run("mlrunway.local.serving.app:create_app", factory=True, host=state.host, port=state.port,
                workers=state.workers, log_level="warning", access_log=False, timeout_graceful_shutdown=10)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
