"""Where an endpoint's server on a Ray node listens: a free port of the node's published range, or any."""

from __future__ import annotations

import socket

import pytest

from mlrunway.ray.server import SCORING_PORTS_ENV, scoring_socket


def test_the_server_binds_the_first_free_port_of_the_nodes_published_range(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        taken.listen()
        monkeypatch.setenv(SCORING_PORTS_ENV, f"{busy}-{busy + 20}")
        with scoring_socket("127.0.0.1") as sock:
            assert busy < sock.getsockname()[1] <= busy + 20
        monkeypatch.setenv(SCORING_PORTS_ENV, f"{busy}-{busy}")
        with pytest.raises(SystemExit, match=f"every port of {SCORING_PORTS_ENV}={busy}-{busy} is taken"):
            scoring_socket("127.0.0.1")


def test_a_range_that_is_not_one_is_refused_naming_the_variable_and_no_range_means_any_port(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SCORING_PORTS_ENV, "30000-3000x")
    with pytest.raises(SystemExit, match=f"{SCORING_PORTS_ENV}='30000-3000x' is not a range of ports"):
        scoring_socket("127.0.0.1")
    monkeypatch.delenv(SCORING_PORTS_ENV)
    with scoring_socket("127.0.0.1") as sock:
        assert sock.getsockname()[1] > 0
