#!/usr/bin/env python3
"""A client of streamlined's control protocol written from its documentation alone
(ARCHITECTURE.md "Control protocol"), as a C or Python program would: a 4-byte
little-endian length, then a JSON object; descriptors as SCM_RIGHTS on the first byte.

usage: rawclient.py SOCKET STEP...
steps:
  hello                 send hello (version 1) and print the reply
  hello:V               hello with protocol version V
  ping                  ping and print the reply
  open:PIPELINE         open a run (no stdio) and print the reply
  activate:RUN          activate run RUN detached (a number, or `last` for the last opened)
  activate_attached:RUN activate it attached (it stops when this connection ends)
  stream:NAME           open_stream NAME; print the reply and how many fds came
  ps                    print the runs
  send:TEXT             send TEXT as one frame body, unchecked
  raw:HEX               write these bytes as they are
  fds:N                 send ping with N descriptors of /dev/null attached
  read                  read and print one message
  sleep:S               sleep S seconds
  say:TEXT              print TEXT and flush (a marker the test waits for)
Each reply is printed as one JSON line; a closed connection prints {"closed": true}.
"""
import json, os, socket, struct, sys, time

def send(s, body, fds=()):
    data = struct.pack('<I', len(body)) + body
    try:
        if fds:
            s.sendmsg([data[:1]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack('%di' % len(fds), *fds))])
            s.sendall(data[1:])
        else:
            s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        # The daemon refused the frame and closed before we finished writing it; its
        # answer (if any) is still there to read.
        pass

def recv_exact(s, n):
    buf = b''
    while len(buf) < n:
        try:
            chunk = s.recv(n - len(buf))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        buf += chunk
    return buf

def read(s):
    head = recv_exact(s, 4)
    if head is None:
        print(json.dumps({"closed": True}), flush=True)
        return None
    (n,) = struct.unpack('<I', head)
    body = recv_exact(s, n)
    if body is None:
        print(json.dumps({"closed": True}), flush=True)
        return None
    m = json.loads(body)
    print(json.dumps(m), flush=True)
    return m

def main():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    ids = iter(range(1, 1 << 30))
    last = None
    for step in sys.argv[2:]:
        op, _, arg = step.partition(':')
        if op == 'hello':
            send(s, json.dumps({"id": next(ids), "op": "hello", "version": int(arg or 1), "client": "rawclient.py"}).encode())
            read(s)
        elif op == 'ping':
            send(s, json.dumps({"id": next(ids), "op": "ping", "token": 42}).encode())
            read(s)
        elif op == 'open':
            send(s, json.dumps({"id": next(ids), "op": "open", "pipeline": arg}).encode())
            m = read(s)
            if m and m.get("reply") == "opened":
                last = m["run"]
        elif op in ('activate', 'activate_attached'):
            run = last if arg == 'last' else int(arg)
            send(s, json.dumps({"id": next(ids), "op": "activate", "run": run, "detach": op == 'activate'}).encode())
            read(s)
        elif op == 'stream':
            send(s, json.dumps({"id": next(ids), "op": "open_stream", "name": arg}).encode())
            msg, anc, _, _ = s.recvmsg(4, socket.CMSG_SPACE(8 * 4))
            fds = sum(len(d) // 4 for (l, t, d) in anc if l == socket.SOL_SOCKET and t == socket.SCM_RIGHTS)
            if len(msg) < 4:
                msg += recv_exact(s, 4 - len(msg)) or b''
            (n,) = struct.unpack('<I', msg)
            m = json.loads(recv_exact(s, n))
            m["fds_received"] = fds
            print(json.dumps(m), flush=True)
        elif op == 'ps':
            send(s, json.dumps({"id": next(ids), "op": "ps"}).encode())
            read(s)
        elif op == 'send':
            send(s, arg.encode())
            if read(s) is None:
                return
        elif op == 'raw':
            s.sendall(bytes.fromhex(arg))
        elif op == 'fds':
            fd = os.open('/dev/null', os.O_RDONLY)
            send(s, json.dumps({"id": next(ids), "op": "ping"}).encode(), [fd] * int(arg))
            if read(s) is None:
                return
        elif op == 'read':
            if read(s) is None:
                return
        elif op == 'sleep':
            time.sleep(float(arg))
        elif op == 'say':
            print(arg, flush=True)
        else:
            sys.exit('unknown step ' + step)

main()
