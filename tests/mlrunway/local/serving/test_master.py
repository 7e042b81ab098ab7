"""A recovered master's sockets: those its predecessor's orphaned workers listen on, adopted whole (so no
connection queued on them is lost), each once, or, where that is refused, new ones bound beside them; one per
worker, each spread an even share of new connections by the kernel."""

from __future__ import annotations

import os
import select
import socket

from mlrunway.local.serving import master


def inode(sock: socket.socket) -> str:
    return os.readlink(f"/proc/self/fd/{sock.fileno()}")


def test_the_orphans_listening_sockets_are_adopted_whole_and_a_refusal_binds_a_new_one(monkeypatch):
    theirs = master.listening_sockets("127.0.0.1", 0, 1)[0]
    theirs.listen()
    port = theirs.getsockname()[1]
    second = master.listening_sockets("127.0.0.1", port, 1)[0]
    second.listen()
    named = f"{os.getpid()}:{theirs.fileno()},{os.getpid()}:{second.fileno()},{os.getpid()}:{theirs.fileno()}"
    monkeypatch.setenv(master.ADOPT_ENV, named)  # two orphans' sockets, one of them named twice
    adopted = master.listening_sockets("127.0.0.1", port, 3)
    assert [inode(s) for s in adopted[:2]] == [inode(theirs), inode(second)]  # the same sockets, each once
    assert inode(adopted[2]) not in (inode(theirs), inode(second))  # and one bound beside them
    adopted[2].close()
    client = socket.create_connection(("127.0.0.1", port))
    theirs.close()  # the orphans exit: the connection queued on its socket is still there to accept
    second.close()
    ready, _, _ = select.select(adopted[:2], [], [], 5)
    accepted, _ = ready[0].accept()
    client.sendall(b"x")
    assert accepted.recv(1) == b"x"
    for refused in (f"{2**22 + 7}:3", f"{os.getpid()}:{client.fileno()}", f"{os.getpid()}:{adopted[0].fileno()}"):
        monkeypatch.setenv(master.ADOPT_ENV, refused)  # no such process; not a listening socket; another port
        fresh = master.listening_sockets("127.0.0.1", port + 1 if refused.endswith(str(adopted[0].fileno())) else port, 1)
        assert inode(fresh[0]) not in (inode(adopted[0]), inode(adopted[1]))
        fresh[0].close()
    for sock in (client, accepted, *adopted[:2]):
        sock.close()


def test_each_worker_socket_gets_a_share_of_a_burst_of_connections():
    slots = master.listening_sockets("127.0.0.1", 0, 1)
    port = slots[0].getsockname()[1]
    slots += master.listening_sockets("127.0.0.1", port, 1)
    for sock in slots:
        sock.listen(64)
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(64)]
    counts = []
    for sock in slots:
        sock.setblocking(False)
        accepted = []
        while True:
            try:
                accepted.append(sock.accept()[0])
            except BlockingIOError:
                break
        counts.append(len(accepted))
        for conn in accepted:
            conn.close()
    for client in clients:
        client.close()
    assert sum(counts) == 64 and min(counts) >= 16, counts  # a 50/50 hash: P(fewer than 16 of 64) < 1e-4
