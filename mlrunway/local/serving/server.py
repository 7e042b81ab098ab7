"""Run an endpoint's server: ``python -m mlrunway.local.serving.server <endpoint_dir>`` (uvicorn, N workers).

The master binds one socket per worker to the port with SO_REUSEPORT
(:func:`mlrunway.local.serving.master.listening_sockets`) and always runs a multiprocess supervisor, even for one
worker: its workers then outlive a killed master and serve on until a recovered master replaces them. The master
also rotates the endpoint's long-lived logs (``logs/server.log``, each deployment's ``logs/score.log``) past
``MLRUNWAY_LOG_MAX_BYTES`` (:func:`mlrunway.local.files.rotate_log`): a score.py that prints or fails on every
request would otherwise fill the disk over months.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import time
from collections.abc import Generator
from pathlib import Path

import uvicorn
from uvicorn.supervisors.multiprocess import Multiprocess, Process

from mlrunway.local.files import log_max_bytes, rotate_log
from mlrunway.local.serving.master import bind_slot, listening_sockets
from mlrunway.local.serving.state import EndpointState
from mlrunway.serving import app
from mlrunway.serving.app import DRAIN_CAP_BYTES, ENDPOINT_DIR_ENV
from mlrunway.serving.guard import LIMITS_ENV, Limits

log = logging.getLogger("uvicorn.error")
STARTUP_FAILURE = 3  # uvicorn.config.STARTUP_FAILURE: a worker that could not start (the app, the socket)
ROTATE_EVERY_S = 1.0  # how often the master looks at its logs' sizes (a stat each)


def main(endpoint_dir: Path) -> None:
    state = EndpointState.load(endpoint_dir)
    os.environ[ENDPOINT_DIR_ENV] = str(endpoint_dir)
    # The workers read their limits from the environment when the protocol's module is imported.
    os.environ[LIMITS_ENV] = Limits(state.max_header_bytes, state.max_headers, state.header_timeout_s,
                                    state.body_timeout_s, DRAIN_CAP_BYTES, state.send_timeout_s).encode()
    from mlrunway.serving.guard import GuardedProtocol

    serve(state, GuardedProtocol, listening_sockets(state.host, state.port, state.workers))


class _Server(uvicorn.Server):
    """uvicorn's server, but a worker stopped by a signal exits as Python does (its exit handlers run, as a
    gunicorn worker's do under Azure's scoring server) instead of raising the signal again once it has stopped:
    a score.py that keeps rows to collect in batches writes them at exit, and so does the capture writer."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        with super().capture_signals():
            yield
            # What uvicorn would raise again, dying of it without exit handlers (uvicorn >= 0.29 keeps it there; a
            # uvicorn that renames it is caught by the endpoint test of a stopped worker's exit handlers)
            if isinstance(captured := getattr(self, "_captured_signals", None), list):
                captured.clear()


class _Worker(Process):
    @property
    def server(self) -> uvicorn.Server:
        if self._server is None:
            self._server = _Server(config=self.config)
        return self._server


class Slotted(Multiprocess):
    """uvicorn's supervisor, but worker ``i`` listens on ``slots[i]`` alone, and a worker that dies is replaced on
    its own socket (kept open by the supervisor meanwhile, so the connections queued on it wait rather than
    drop). Each slot's accept queue is its worker's: the kernel's SO_REUSEPORT hash deals connections out as a fair
    draw, where one shared socket gave them to whichever worker woke first. SIGTTIN adds a worker on a new socket
    (a deployment that asks for more instances); removing one by SIGTTOU is not offered."""

    def __init__(self, config: uvicorn.Config, slots: list[socket.socket]) -> None:
        super().__init__(config, sockets=slots)
        self.slots = slots
        self.folder = Path(os.environ[ENDPOINT_DIR_ENV]) if ENDPOINT_DIR_ENV in os.environ else None
        self.log_max_bytes = log_max_bytes()
        self.next_rotation = 0.0

    def _spawn(self, slot: int) -> Process:
        process = _Worker(self.config, [self.slots[slot]])
        process.start()
        return process

    def init_processes(self) -> None:
        self.processes = [self._spawn(slot) for slot in range(len(self.slots))]

    def restart_all(self) -> None:  # SIGHUP: each worker replaced on its own socket, the new one up first
        for slot, old in enumerate(self.processes):
            if self.should_exit.is_set():
                return
            new = self._spawn(slot)
            if not new.wait_until_ready(self.config.timeout_worker_healthcheck, self.should_exit):
                new.kill()
                new.join()
                return
            old.terminate()
            old.join()
            self.processes[slot] = new

    def keep_subprocess_alive(self) -> None:
        if self.should_exit.is_set():
            return
        self.rotate_logs()
        for slot, process in enumerate(self.processes):
            if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                continue
            process.kill()  # hung: killed; dead: reaped
            process.join()
            if process.exitcode == STARTUP_FAILURE:  # it would fail the same way every time
                log.error("Child process [%s] failed to start, stopping the parent process.", process.pid)
                self.should_exit.set()
                return
            if self.should_exit.is_set():
                return
            log.info("Child process [%s] died", process.pid)
            self.processes[slot] = self._spawn(slot)

    def rotate_logs(self) -> None:
        """Rotate the endpoint's logs that passed their size, at most once a second (uvicorn's loop runs twice)."""
        if self.folder is None or time.monotonic() < self.next_rotation:
            return
        self.next_rotation = time.monotonic() + ROTATE_EVERY_S
        for path in [self.folder / "logs" / "server.log", *self.folder.glob("deployments/*/logs/score.log")]:
            try:
                rotate_log(path, self.log_max_bytes)
            except OSError as error:  # a full disk: the log waits for the next look
                log.warning("could not rotate %s: %s", path, error)

    def handle_ttin(self) -> None:  # a deployment asked for more instances: one more worker, on a socket of its own
        self.slots.append(bind_slot(self.config.host, self.config.port))
        self.processes_num += 1
        self.processes.append(self._spawn(len(self.slots) - 1))

    def handle_ttou(self) -> None:
        log.warning("SIGTTOU ignored: set the endpoint's workers to change their number")


def serve(state: EndpointState, protocol: type[asyncio.Protocol] | str, sockets: list[socket.socket]) -> None:
    """The endpoint's app in one uvicorn worker per socket of ``sockets``, speaking HTTP through ``protocol``."""
    config = uvicorn.Config("mlrunway.local.serving.server:create_app", factory=True, host=state.host, port=state.port,
                            workers=len(sockets), log_level="warning", access_log=False, timeout_graceful_shutdown=10,
                            http=protocol, timeout_keep_alive=5)
    Slotted(config, sockets).run()


def create_app() -> app.ScoringApp:
    """The app factory uvicorn calls in each worker: the scoring app (:mod:`mlrunway.serving.app`) over the state
    the workspace keeps."""
    return app.create_app(EndpointState.load)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
