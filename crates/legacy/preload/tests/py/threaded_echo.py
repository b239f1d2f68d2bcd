"""A UDP echo server whose threads share one socket, each in blocking recvfrom.

  threaded_echo.py PORT THREADS COUNT
Prints "ready", echoes until COUNT datagrams were echoed in all, prints "echoed N" and how
many threads took part, and exits.
"""
import socket
import sys
import threading

port, nthreads, count = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", port))
lock = threading.Lock()
echoed = 0
by_thread = [0] * nthreads
done = threading.Event()


def serve(k):
    global echoed
    while True:
        data, addr = s.recvfrom(2048)
        if data == b"stop":
            return
        s.sendto(data, addr)
        with lock:
            echoed += 1
            by_thread[k] += 1
            if echoed == count:
                done.set()


threads = [threading.Thread(target=serve, args=(k,)) for k in range(nthreads)]
for t in threads:
    t.start()
print("ready", flush=True)
done.wait(30)
# Wake every thread with a datagram of its own.
stopper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in threads:
    stopper.sendto(b"stop", ("127.0.0.1", port))
for t in threads:
    t.join(10)
print("echoed", echoed, flush=True)
