"""A recovered master's socket: the one its predecessor's orphaned workers listen on, adopted whole (so no
connection queued on it is lost), or, where that is refused, a new one bound beside it."""

from __future__ import annotations

import os
import socket

from mlrunway.local.serving import master


def inode(sock: socket.socket) -> str:
    return os.readlink(f"/proc/self/fd/{sock.fileno()}")


def test_the_orphans_listening_socket_is_adopted_whole_and_a_refusal_binds_a_new_one(monkeypatch):
    theirs = master.listening_socket("127.0.0.1", 0)
    theirs.listen()
    port = theirs.getsockname()[1]
    monkeypatch.setenv(master.ADOPT_ENV, f"{os.getpid()}:{theirs.fileno()}")
    adopted = master.listening_socket("127.0.0.1", port)
    assert adopted.fileno() != theirs.fileno() and inode(adopted) == inode(theirs)  # the same socket
    client = socket.create_connection(("127.0.0.1", port))
    theirs.close()  # the orphans exit: the connection queued on the socket is still there to accept
    accepted, _ = adopted.accept()
    client.sendall(b"x")
    assert accepted.recv(1) == b"x"
    for refused in (f"{2**22 + 7}:3", f"{os.getpid()}:{client.fileno()}", f"{os.getpid()}:{adopted.fileno()}"):
        monkeypatch.setenv(master.ADOPT_ENV, refused)  # no such process; not a listening socket; another port
        fresh = master.listening_socket("127.0.0.1", port + 1 if refused.endswith(str(adopted.fileno())) else port)
        assert inode(fresh) != inode(adopted)
        fresh.close()
    for sock in (client, accepted, adopted):
        sock.close()
