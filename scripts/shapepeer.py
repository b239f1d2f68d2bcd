#!/usr/bin/env python3
"""Peers for the process-shaping tests and `streamline-bench shape`: small, unmodified
Python programs (dynamically linked through the interpreter) that move bytes over TCP and
UDP on loopback and report what they saw as one JSON line on stdout.

  serve PORT FILE [CLIENTS]        epoll server (selectors, non-blocking sockets): sends FILE
                                   to each of CLIENTS connections (0 = until killed), then
                                   exits; prints {"port": P} once listening
  fetch PORT [OUT]                 connects to 127.0.0.1:PORT, reads to EOF, writes the bytes
                                   to OUT (default: discards), prints {"bytes","secs","first","last"}
  udprecv PORT COUNT [IDLE]        receives COUNT datagrams (or stops IDLE s after the last),
                                   prints {"datagrams","bytes","first","last","sizes"}
  udpsend PORT COUNT SIZE          sends COUNT datagrams of SIZE bytes (sendto, blocking)
"""
import json
import selectors
import socket
import sys
import time


def serve(port, path, clients):
    data = open(path, "rb").read()
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(64)
    ls.setblocking(False)
    print(json.dumps({"port": ls.getsockname()[1]}), flush=True)
    sel = selectors.DefaultSelector()  # epoll on Linux
    sel.register(ls, selectors.EVENT_READ, None)
    done = 0
    while clients == 0 or done < clients:
        for key, _ in sel.select(timeout=1.0):
            if key.data is None:
                try:
                    c, _ = ls.accept()
                except BlockingIOError:
                    continue
                c.setblocking(False)
                sel.register(c, selectors.EVENT_WRITE, [c, 0])
                continue
            c, off = key.data
            try:
                n = c.send(data[off:off + 256 * 1024])
            except BlockingIOError:
                continue
            except OSError:  # the client went away: drop it
                sel.unregister(c)
                c.close()
                done += 1
                continue
            key.data[1] = off + n
            if key.data[1] >= len(data):
                sel.unregister(c)
                c.close()
                done += 1


def fetch(port, out):
    s = socket.create_connection(("127.0.0.1", port))
    t0 = time.monotonic()
    first = last = None
    total = 0
    f = open(out, "wb") if out else None
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        now = time.monotonic()
        first = first if first is not None else now
        last = now
        total += len(b)
        if f:
            f.write(b)
    if f:
        f.close()
    print(json.dumps({"bytes": total, "secs": time.monotonic() - t0, "first": first, "last": last}), flush=True)


def udprecv(port, count, idle):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind(("127.0.0.1", port))
    print(json.dumps({"port": s.getsockname()[1]}), flush=True)
    n = total = 0
    first = last = None
    sizes = {}
    s.settimeout(30.0)
    while n < count:
        try:
            b = s.recv(65536)
        except socket.timeout:
            break
        now = time.monotonic()
        first = first if first is not None else now
        last = now
        n += 1
        total += len(b)
        sizes[len(b)] = sizes.get(len(b), 0) + 1
        s.settimeout(idle)
    print(json.dumps({"datagrams": n, "bytes": total, "first": first, "last": last, "sizes": sizes}), flush=True)


def udpsend(port, count, size):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payload = bytes(size)
    t0 = time.monotonic()
    for _ in range(count):
        s.sendto(payload, ("127.0.0.1", port))
    print(json.dumps({"sent": count, "secs": time.monotonic() - t0}), flush=True)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "serve":
        serve(int(args[0]), args[1], int(args[2]) if len(args) > 2 else 1)
    elif cmd == "fetch":
        fetch(int(args[0]), args[1] if len(args) > 1 else None)
    elif cmd == "udprecv":
        udprecv(int(args[0]), int(args[1]), float(args[2]) if len(args) > 2 else 2.0)
    elif cmd == "udpsend":
        udpsend(int(args[0]), int(args[1]), int(args[2]))
    else:
        sys.exit(f"unknown command {cmd}")
