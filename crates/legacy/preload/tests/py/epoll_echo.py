"""A UDP echo server on select.epoll (level-triggered, one datagram per event).

  epoll_echo.py PORT[,PORT...] COUNT
Binds 127.0.0.1:PORT for each port, prints "ready", echoes datagrams until COUNT were
echoed (or 10 s pass with nothing), prints "echoed N" and exits.
"""
import select
import socket
import sys

ports = [int(p) for p in sys.argv[1].split(",")]
count = int(sys.argv[2])
ep = select.epoll()
socks = {}
for p in ports:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", p))
    s.setblocking(False)
    ep.register(s.fileno(), select.EPOLLIN)
    socks[s.fileno()] = s
print("ready", flush=True)
echoed = 0
while echoed < count:
    events = ep.poll(10)
    if not events:
        break
    for fd, ev in events:
        s = socks[fd]
        try:
            data, addr = s.recvfrom(2048)
        except BlockingIOError:
            # Readiness said there was a datagram: there must be one.
            print("spurious readiness on port", s.getsockname()[1], flush=True)
            continue
        s.sendto(data, addr)
        echoed += 1
print("echoed", echoed, flush=True)
