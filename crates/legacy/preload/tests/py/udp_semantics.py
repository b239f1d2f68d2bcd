"""Exercise a UDP server socket's receive and send semantics and print a transcript.

Run plain and under libslpreload.so (the test compares the transcripts line by line):
  udp_semantics.py PORT 4|6
The server socket is bound to PORT on loopback (the port the policy names); a client
socket in the same process talks to it.
"""
import errno
import socket
import struct
import sys

port = int(sys.argv[1])
v6 = sys.argv[2] == "6"
af = socket.AF_INET6 if v6 else socket.AF_INET
host = "::1" if v6 else "127.0.0.1"
lo = socket.if_nametoindex("lo")
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)  # <linux/in.h>; older Pythons lack the name


def out(*a):
    print(*a, flush=True)


srv = socket.socket(af, socket.SOCK_DGRAM)
if v6:
    srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
srv.bind((host, port))
# After bind, as dnsmasq does: the library must pick the option up.
if v6:
    srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
else:
    srv.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
cli = socket.socket(af, socket.SOCK_DGRAM)
cli.bind((host, 0))
cli.settimeout(5)
caddr = cli.getsockname()
to = (host, port)


def who(addr):
    return "client" if addr[:2] == caddr[:2] else "other %r" % (addr,)


def pktinfo(anc):
    res = []
    for level, typ, data in anc:
        if not v6 and level == socket.IPPROTO_IP and typ == IP_PKTINFO:
            ifindex, spec, dst = struct.unpack("i4s4s", data[:12])
            res.append("pktinfo if=%s spec_dst=%s dst=%s" % ("lo" if ifindex == lo else ifindex, socket.inet_ntoa(spec), socket.inet_ntoa(dst)))
        elif v6 and level == socket.IPPROTO_IPV6 and typ == socket.IPV6_PKTINFO:
            dst, ifindex = struct.unpack("16sI", data[:20])
            res.append("pktinfo6 if=%s dst=%s" % ("lo" if ifindex == lo else ifindex, socket.inet_ntop(socket.AF_INET6, dst)))
        else:
            res.append("cmsg %d/%d %d bytes" % (level, typ, len(data)))
    return " ".join(res) or "no cmsg"


# Nothing there yet: non-blocking socket, and MSG_DONTWAIT on a blocking one.
srv.setblocking(False)
try:
    srv.recv(100)
    out("empty, O_NONBLOCK: got data")
except BlockingIOError as e:
    out("empty, O_NONBLOCK:", errno.errorcode[e.errno])
srv.setblocking(True)
try:
    srv.recv(100, socket.MSG_DONTWAIT)
    out("empty, MSG_DONTWAIT: got data")
except BlockingIOError as e:
    out("empty, MSG_DONTWAIT:", errno.errorcode[e.errno])
# SO_RCVTIMEO on a blocking socket: the receive gives up with EAGAIN.
srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 200000))
try:
    srv.recv(100)
    out("empty, SO_RCVTIMEO: got data")
except BlockingIOError as e:
    out("empty, SO_RCVTIMEO:", errno.errorcode[e.errno])
srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 0))

cli.sendto(b"first datagram", to)
cli.sendto(b"second", to)
cli.sendto(b"0123456789", to)
cli.sendto(b"c", to)
cli.sendto(b"", to)

out("peek:", srv.recv(100, socket.MSG_PEEK))
out("peek again:", srv.recv(100, socket.MSG_PEEK))
buf = bytearray(5)
n = srv.recv_into(buf, 5, socket.MSG_TRUNC)
out("MSG_TRUNC into 5 bytes: returns", n, "holds", bytes(buf))
data, anc, flags, addr = srv.recvmsg(100, socket.CMSG_SPACE(64))
out("recvmsg:", data, "flags", flags, who(addr), pktinfo(anc))
data, anc, flags, addr = srv.recvmsg(4, socket.CMSG_SPACE(64))
out("short buffer:", data, "MSG_TRUNC" if flags & socket.MSG_TRUNC else "-", pktinfo(anc))
data, anc, flags, addr = srv.recvmsg(10, 1)
out("tiny control buffer:", data, "MSG_CTRUNC" if flags & socket.MSG_CTRUNC else "-", len(anc))
data, addr = srv.recvfrom(100)
out("empty datagram:", data, who(addr))
# Larger than the ring takes (ring mode: through the socket itself). Sent on its own: the
# two paths do not keep order between them (module udp::ring).
cli.sendto(b"L" * 3000, to)
data, anc, flags, addr = srv.recvmsg(4000, socket.CMSG_SPACE(64))
out("large:", len(data), data == b"L" * 3000, who(addr), pktinfo(anc))

# Replies, as a server sends them: sendto, and sendmsg with a source-address cmsg.
for i in range(3):
    srv.sendto(b"reply %d" % i, caddr)
if v6:
    pi = struct.pack("16sI", socket.inet_pton(socket.AF_INET6, host), 0)
    srv.sendmsg([b"via ", b"sendmsg"], [(socket.IPPROTO_IPV6, socket.IPV6_PKTINFO, pi)], 0, caddr)
else:
    pi = struct.pack("i4s4s", 0, socket.inet_aton(host), socket.inet_aton("0.0.0.0"))
    srv.sendmsg([b"via ", b"sendmsg"], [(socket.IPPROTO_IP, IP_PKTINFO, pi)], 0, caddr)
# Connected-style send without an address fails as the kernel says.
try:
    srv.send(b"nowhere")
    out("send without address: sent")
except OSError as e:
    out("send without address:", errno.errorcode[e.errno])
for i in range(4):
    data, addr = cli.recvfrom(100)
    out("client got:", data, "from server" if addr[1] == port else addr)
out("done")
