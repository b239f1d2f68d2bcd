#!/usr/bin/env python3
"""A job with pipes between its processes, for `streamline exec -- python3 examples/job.py`:
it streams 4 MiB through `gzip -1 | gzip -dc` (two children joined by pipes) and prints
how many bytes came back and whether they are the bytes sent."""
import hashlib
import subprocess
import threading

data = bytes((i * 31) & 0xFF for i in range(1 << 16)) * 64
gz = subprocess.Popen(["gzip", "-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
gunzip = subprocess.Popen(["gzip", "-dc"], stdin=gz.stdout, stdout=subprocess.PIPE)
gz.stdout.close()


def feed():
    gz.stdin.write(data)
    gz.stdin.close()


t = threading.Thread(target=feed)
t.start()
back = gunzip.stdout.read()
t.join()
gz.wait()
gunzip.wait()
same = hashlib.sha256(back).digest() == hashlib.sha256(data).digest()
print(f"job: {len(back)} bytes back, {'identical' if same else 'DIFFERENT'}")
raise SystemExit(0 if same else 1)
