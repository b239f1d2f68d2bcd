"""A client of tests/httplog.rs that pipelines: it sends every request given on one
connection in a single write, then reads until the server closes (the last request says
`Connection: close`). Usage: pipeline.py ADDR PORT REQUEST...  where each REQUEST is
METHOD|PATH|HOST|USER-AGENT."""
import socket
import sys

addr, port, reqs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
out = b""
for i, r in enumerate(reqs):
    method, path, host, ua = r.split("|")
    out += f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: {ua}\r\n".encode()
    if method in ("POST", "PUT", "PATCH"):
        out += b"Content-Length: 4\r\n"
    if i == len(reqs) - 1:
        out += b"Connection: close\r\n"
    out += b"\r\n"
    if method in ("POST", "PUT", "PATCH"):
        out += b"data"
s = socket.create_connection((addr, port), timeout=10)
s.sendall(out)
while s.recv(65536):
    pass
s.close()
