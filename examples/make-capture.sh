#!/usr/bin/env bash
# make-capture.sh — regenerate the sample packet capture (examples/sample.pcap).
#
#   bash examples/make-capture.sh [OUTPUT]        (as root; default OUTPUT: examples/sample.pcap)
#
# Two network namespaces joined by a veth pair, real servers in one (python3 HTTP server,
# dnsmasq, socat, iperf3) and real clients in the other (curl, dig, ping, socat, iperf3,
# logger), recorded by tcpdump on the client side's interface. Nothing leaves the two
# namespaces; every client is bounded in count and time; everything started here is stopped
# and both namespaces are deleted on exit, also on failure or Ctrl-C. Content is fixed
# (files from a seeded generator, fixed MACs and addresses); timestamps, ports and iperf3's
# cookies vary between runs. See examples/README.md for what the capture contains.
set -Eeuo pipefail
export LC_ALL=C PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${1:-$HERE/sample.pcap}

NS_A=sl-cap-a-$$            # the client side; tcpdump listens on its eth0
NS_B=sl-cap-b-$$            # the server side
A4=10.99.0.1 B4=10.99.0.2
A6=fd99::1   B6=fd99::2
MAC_A=02:00:0a:63:00:01 MAC_B=02:00:0a:63:00:02

die() { echo "make-capture: error: $*" >&2; exit 1; }
say() { printf 'make-capture: %s\n' "$*" >&2; }

# ---------------------------------------------------------------- prerequisites
[[ $(id -u) -eq 0 ]] || die "must run as root (it creates network namespaces and runs tcpdump): sudo bash $0 ${1:-}"

# command -> Debian package that provides it
declare -A PKG=(
  [ip]=iproute2 [ss]=iproute2 [ethtool]=ethtool [tcpdump]=tcpdump [curl]=curl
  [dnsmasq]=dnsmasq-base [dig]=bind9-dnsutils [ping]=iputils-ping [iperf3]=iperf3
  [socat]=socat [python3]=python3 [logger]=bsdutils [unshare]=util-linux
  [hostname]=hostname [timeout]=coreutils
)
missing=()
for c in "${!PKG[@]}"; do
  command -v "$c" >/dev/null 2>&1 || missing+=("${PKG[$c]}")
done
if ((${#missing[@]})); then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  command -v apt-get >/dev/null 2>&1 \
    || die "missing commands from packages: ${missing[*]} (and no apt-get to install them)"
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]} failed"
  for c in "${!PKG[@]}"; do
    command -v "$c" >/dev/null 2>&1 || die "'$c' still missing after installing ${PKG[$c]}"
  done
fi
PY=/usr/bin/python3; [[ -x $PY ]] || PY=$(command -v python3)

# ---------------------------------------------------------------- cleanup
WORK=$(mktemp -d /tmp/sl-cap.XXXXXX)
chmod 755 "$WORK"           # dnsmasq drops to nobody and still has to reach its log file
TCPDUMP_PID='' ETC_NETNS_CREATED=''

# the processes in our namespaces, which are exactly the ones this script started
ns_pids() {
  local ns
  for ns in "$NS_A" "$NS_B"; do
    [[ -e /run/netns/$ns ]] && ip netns pids "$ns" 2>/dev/null
  done
  return 0
}
cleanup() {
  local rc=$? ns pids i
  trap - EXIT INT TERM ERR
  set +e
  mapfile -t pids < <(ns_pids)
  ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null
  for i in $(seq 30); do
    mapfile -t pids < <(ns_pids)
    ((${#pids[@]})) || break
    sleep 0.1
  done
  ((${#pids[@]})) && kill -KILL "${pids[@]}" 2>/dev/null
  for ns in "$NS_A" "$NS_B"; do
    [[ -e /run/netns/$ns ]] && ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  [[ -n $ETC_NETNS_CREATED ]] && rmdir /etc/netns 2>/dev/null
  wait 2>/dev/null
  if ((rc != 0)) && [[ -d $WORK ]]; then
    say "failed (exit $rc); logs:"
    for f in "$WORK"/*.log; do [[ -s $f ]] && { echo "== $f"; tail -n 20 "$f"; } >&2; done
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'say "failed at line $LINENO: $BASH_COMMAND"' ERR
trap 'exit 130' INT
trap 'exit 143' TERM

inA() { ip netns exec "$NS_A" "$@"; }

# wait_listen NS PROTO PORT: until a socket listens there (at most 5 s)
wait_listen() {
  local ns=$1 proto=$2 port=$3 i flag=-Hltn
  [[ $proto == udp ]] && flag=-Hlun
  for i in $(seq 50); do
    [[ -n $(ip netns exec "$ns" ss $flag "sport = :$port" 2>/dev/null) ]] && return 0
    sleep 0.1
  done
  die "nothing listening on $proto port $port in $ns"
}

# ---------------------------------------------------------------- namespaces
say "namespaces $NS_A ($A4, $A6) <-> $NS_B ($B4, $B6)"
ip netns add "$NS_A" || die "cannot create network namespaces (ip netns add)"
ip netns add "$NS_B"
inA ip link add eth0 address "$MAC_A" type veth peer name eth0 address "$MAC_B" netns "$NS_B"
for side in A B; do
  ns=NS_$side v4=${side}4 v6=${side}6
  ip netns exec "${!ns}" ip link set lo up
  # no segmentation/checksum offload: the capture shows wire-sized frames with valid checksums
  ip netns exec "${!ns}" ethtool -K eth0 tx off tso off gso off gro off >/dev/null 2>&1 \
    || say "warning: ethtool -K failed; frames may be offload-sized with partial checksums"
  ip netns exec "${!ns}" ip link set eth0 up
  ip netns exec "${!ns}" ip addr add "${!v4}/24" dev eth0
  ip netns exec "${!ns}" ip -6 addr add "${!v6}/64" dev eth0 nodad
done
# clients resolve *.example.test through the dnsmasq below (ip netns exec bind-mounts this)
[[ -d /etc/netns ]] || ETC_NETNS_CREATED=1
mkdir -p "/etc/netns/$NS_A"
printf 'nameserver %s\noptions timeout:2 attempts:1\n' "$B4" >"/etc/netns/$NS_A/resolv.conf"
printf '127.0.0.1 localhost\n::1 localhost\n' >"/etc/netns/$NS_A/hosts"

# ---------------------------------------------------------------- content to serve
WWW=$WORK/www
"$PY" - "$WWW" "$WORK" <<'EOF'
import json, os, random, sys
www, work = sys.argv[1], sys.argv[2]
rnd = random.Random(20240601)                 # fixed seed: same files every run
words = ("stream ring buffer tag filter kernel user space pipeline packet socket "
         "thesis adaptive operating system throughput latency copy share memory").split()
def text(n):
    out, size = [], 0
    while size < n:
        line = " ".join(rnd.choice(words) for _ in range(rnd.randint(6, 14))).capitalize() + "."
        out.append(line); size += len(line) + 1
    return "\n".join(out)
def put(rel, data):
    p = os.path.join(www, rel); os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f: f.write(data if isinstance(data, bytes) else data.encode())
links = ["style.css", "docs/guide.html", "data/readings.json", "data/readings.csv", "data/blob.bin"]
put("index.html", "<!doctype html>\n<html><head><title>Streamline sample</title>"
    "<link rel=stylesheet href=/style.css></head>\n<body><h1>Streamline sample site</h1>\n<ul>\n"
    + "".join(f'<li><a href="/{l}">{l}</a></li>\n' for l in links) + "</ul>\n<p>" + text(1200)
    + "</p></body></html>\n")
put("robots.txt", "User-agent: *\nDisallow: /data/\n")
put("style.css", "".join(f".c{i} {{ color: #{rnd.randrange(1 << 24):06x}; margin: {i % 9}px; }}\n"
                         for i in range(160)))
put("docs/guide.html", "<!doctype html>\n<html><body><h1>Guide</h1>\n"
    + "".join(f"<h2>Section {i}</h2>\n<p>{text(900)}</p>\n" for i in range(1, 23)) + "</body></html>\n")
rows = [{"t": 1700000000 + i, "sensor": f"s{i % 7}", "value": round(rnd.gauss(20, 4), 3)}
        for i in range(1200)]
put("data/readings.json", json.dumps(rows, indent=1) + "\n")
put("data/readings.csv", "t,sensor,value\n" + "".join(f"{r['t']},{r['sensor']},{r['value']}\n" for r in rows))
put("data/blob.bin", rnd.randbytes(192 * 1024))
with open(os.path.join(work, "bulk4.bin"), "wb") as f: f.write(rnd.randbytes(2048 * 1024))
with open(os.path.join(work, "bulk6.bin"), "wb") as f: f.write(rnd.randbytes(512 * 1024))
with open(os.path.join(work, "syslog.txt"), "w") as f:
    for i in range(200):
        f.write(f"sensor s{i % 7} reading {i} value {round(rnd.gauss(20, 4), 3)} status "
                f"{rnd.choice(['ok', 'ok', 'ok', 'warn', 'drift'])}\n")
EOF

cat >"$WORK/httpd.py" <<'EOF'
# A static file server (python's http.server) that also answers POST /api/echo.
import functools, http.server, json, socket, sys
class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"              # keep-alive, so a curl with several URLs reuses one connection
    server_version = "StreamlineSample/1.0"
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/api/echo":
            self.send_error(404, "no such endpoint"); return
        out = json.dumps({"received": len(body), "type": self.headers.get("Content-Type"),
                          "head": body[:40].decode("latin-1")}).encode() + b"\n"
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
class DualStack(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6
    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()
DualStack(("::", 80), functools.partial(Handler, directory=sys.argv[1])).serve_forever()
EOF

# ---------------------------------------------------------------- servers (namespace B)
ip netns exec "$NS_B" "$PY" -u "$WORK/httpd.py" "$WWW" >"$WORK/httpd.log" 2>&1 &
ip netns exec "$NS_B" dnsmasq -k --conf-file=/dev/null --no-resolv --no-hosts --no-poll --user=nobody --group=nogroup \
  --bind-interfaces --listen-address="$B4" --listen-address="$B6" --port=53 \
  --pid-file="$WORK/dnsmasq.pid" --log-queries --log-facility="$WORK/dnsmasq.log" \
  --local=/example.test/ --local=/99.10.in-addr.arpa/ \
  --host-record=www.example.test,"$B4","$B6" \
  --host-record=ns.example.test,"$B4","$B6" \
  --host-record=mail.example.test,"$B4" \
  --host-record=bulk.example.test,"$B4" \
  --host-record=client.example.test,"$A4","$A6" \
  --address=/cdn.example.test/"$B4" --address=/cdn.example.test/"$B6" \
  --cname=docs.example.test,www.example.test \
  --mx-host=example.test,mail.example.test,10 \
  --txt-record=example.test,"v=spf1 ip4:10.99.0.0/24 -all" \
  --txt-record='_streamline.example.test,sample capture,generated by examples/make-capture.sh' \
  --srv-host=_http._tcp.example.test,www.example.test,80,0,10 \
  >"$WORK/dnsmasq.out" 2>&1 &
ip netns exec "$NS_B" iperf3 -s --logfile "$WORK/iperf3-server.log" &
# bulk TCP receivers: one connection each, written to a file to compare with what was sent
ip netns exec "$NS_B" socat -u TCP4-LISTEN:9000,bind="$B4",reuseaddr OPEN:"$WORK/bulk4.recv",creat,trunc >"$WORK/socat-tcp4.log" 2>&1 &
ip netns exec "$NS_B" socat -u TCP6-LISTEN:9001,bind="[$B6]",reuseaddr OPEN:"$WORK/bulk6.recv",creat,trunc >"$WORK/socat-tcp6.log" 2>&1 &
ip netns exec "$NS_B" socat -u UDP6-RECV:514 OPEN:"$WORK/syslog.recv",creat,append >"$WORK/socat-udp.log" 2>&1 &
wait_listen "$NS_B" tcp 80
wait_listen "$NS_B" udp 53
wait_listen "$NS_B" tcp 5201
wait_listen "$NS_B" tcp 9000
wait_listen "$NS_B" tcp 9001
wait_listen "$NS_B" udp 514

# ---------------------------------------------------------------- capture (namespace A)
ip netns exec "$NS_A" tcpdump -i eth0 -n -s 0 -U -Z root -w "$WORK/capture.pcap" >"$WORK/tcpdump.log" 2>&1 &
TCPDUMP_PID=$!
for i in $(seq 100); do grep -q 'listening on' "$WORK/tcpdump.log" && break; sleep 0.1; done
grep -q 'listening on' "$WORK/tcpdump.log" || die "tcpdump did not start: $(cat "$WORK/tcpdump.log")"
sleep 0.3
START=$SECONDS

# ---------------------------------------------------------------- traffic (clients in A)
# every client runs in a namespace under a time limit: TA|TB SECONDS COMMAND...
# (--foreground: the client stays in our process group, so Ctrl-C reaches it at once)
TA() { local t=$1; shift; timeout --foreground "$t" ip netns exec "$NS_A" "$@"; }
TB() { local t=$1; shift; timeout --foreground "$t" ip netns exec "$NS_B" "$@"; }
CURL=(curl -sS --max-time 10 -o /dev/null -w '%{http_code} %{method} %{url_effective}\n')
say "ICMP"
{
  TA 10 ping -n -c 6 -i 0.2 -W 1 "$B4"
  TA 10 ping -n -6 -c 6 -i 0.2 -W 1 "$B6"
  TA 10 ping -n -c 2 -i 0.2 -W 1 -s 1200 "$B4"
  TA 10 ping -n -c 2 -i 0.2 -W 1 -s 3000 "$B4"        # fragmented
  TA 10 ping -n -6 -c 2 -i 0.2 -W 1 -s 3000 "$B6"     # fragmented
  TB 10 ping -n -c 3 -i 0.2 -W 1 "$A4"                # the other direction
  TB 10 ping -n -6 -c 3 -i 0.2 -W 1 "$A6"
} >"$WORK/ping.log"

say "DNS"
DIG=(dig +tries=1 +time=2)
{
  for q in "www.example.test A" "www.example.test AAAA" "ns.example.test A" "mail.example.test A" \
           "example.test MX" "example.test TXT" "_streamline.example.test TXT" \
           "_http._tcp.example.test SRV" "docs.example.test A" "docs.example.test AAAA" \
           "img.cdn.example.test A" "video.cdn.example.test AAAA" "bulk.example.test A" \
           "client.example.test AAAA" "nosuchhost.example.test A" "missing.example.test AAAA" \
           "typo.exmaple.test A"; do
    # shellcheck disable=SC2086
    TA 5 "${DIG[@]}" @"$B4" $q || true
  done
  for q in "www.example.test AAAA" "www.example.test A" "example.test MX" "ns.example.test AAAA" \
           "gone.example.test A" "_streamline.example.test TXT"; do
    # shellcheck disable=SC2086
    TA 5 "${DIG[@]}" @"$B6" $q || true                  # DNS over IPv6
  done
  TA 5 "${DIG[@]}" @"$B4" -x "$B4" || true               # PTR
  TA 5 "${DIG[@]}" @"$B4" -x "$A4" || true
  TA 5 "${DIG[@]}" @"$B6" -x "$B6" || true
  TA 5 "${DIG[@]}" @"$B4" -x 10.99.0.77 || true          # NXDOMAIN
  TA 5 "${DIG[@]}" @"$B4" +tcp example.test TXT || true  # one query over TCP
  TA 5 dig +tries=1 +time=1 -p 5353 @"$B4" www.example.test || true  # closed port: ICMP unreachable
  TA 5 dig +tries=1 +time=1 -p 5353 @"$B6" www.example.test || true  # and ICMPv6 unreachable
} >"$WORK/dig.log" 2>&1

say "HTTP"
{
  # one keep-alive connection fetching a page and what it links to (names through the resolver)
  TA 20 "${CURL[@]}" http://www.example.test/ -o /dev/null http://www.example.test/style.css \
    -o /dev/null http://www.example.test/robots.txt -o /dev/null http://www.example.test/docs/guide.html
  # one connection per request, IPv4
  for p in / style.css docs/guide.html data/readings.json data/readings.csv data/blob.bin \
           missing.html favicon.ico data/old.json; do
    TA 15 "${CURL[@]}" "http://$B4/${p#/}"
  done
  # IPv6
  for p in / robots.txt docs/guide.html data/readings.csv data/blob.bin nope/ favicon.ico; do
    TA 15 "${CURL[@]}" "http://[$B6]/${p#/}"
  done
  TA 15 "${CURL[@]}" -6 http://docs.example.test/docs/guide.html      # CNAME, then AAAA
  TA 15 "${CURL[@]}" -4 http://img.cdn.example.test/style.css
  # HEAD, conditional GET (304), POSTs (form, JSON upload, wrong path), a PUT (501)
  TA 15 "${CURL[@]}" -I "http://$B4/data/blob.bin"
  TA 15 "${CURL[@]}" -I "http://[$B6]/index.html"
  TA 15 "${CURL[@]}" -z "$WWW/style.css" "http://$B4/style.css"
  TA 15 "${CURL[@]}" -d 'sensor=s3&value=21.5&unit=C' "http://$B4/api/echo"
  TA 15 "${CURL[@]}" -H 'Content-Type: application/json' --data-binary @"$WWW/data/readings.json" \
    "http://$B4/api/echo"
  TA 15 "${CURL[@]}" -d '{"sensor":"s1","value":19.25}' -H 'Content-Type: application/json' \
    "http://[$B6]/api/echo"
  TA 15 "${CURL[@]}" -d 'x=1' "http://$B4/api/missing"
  TA 15 "${CURL[@]}" -X PUT -d 'x=1' "http://$B4/data/new.txt"
  # a user agent and extra headers, like a browser
  TA 15 "${CURL[@]}" -A 'Mozilla/5.0 (X11; Linux x86_64) StreamlineSample' \
    -H 'Accept: text/html' -H 'Accept-Language: en' --compressed "http://$B4/index.html"
  # a client polling by name: each round resolves www.example.test (A and AAAA) first
  for i in 1 2 3 4 5; do
    TA 15 "${CURL[@]}" "http://www.example.test/data/readings.csv?since=$((1700000000 + i * 60))"
  done
  TA 15 "${CURL[@]}" -0 "http://$B4/robots.txt"                         # HTTP/1.0
  # connection refused: SYN answered by RST
  TA 5 "${CURL[@]}" "http://$B4:8080/" || true
} >"$WORK/curl.log" 2>&1

# (socat, not iperf3 -n: iperf3 ends the test once the client has handed the bytes to its
# socket, and its server then closes the data connection with data still queued; the stream
# came out anywhere between 0.4 and 2 MB, reset midway. socat delivers all of it, every run.)
say "bulk TCP (socat: 2 MiB over IPv4 to port 9000, 512 KiB over IPv6 to port 9001)"
TA 30 socat -u OPEN:"$WORK/bulk4.bin" TCP4:"$B4:9000" 2>"$WORK/socat-tcp4-client.log"
TA 30 socat -u OPEN:"$WORK/bulk6.bin" TCP6:"[$B6]:9001" 2>"$WORK/socat-tcp6-client.log"

say "UDP (iperf3, 1 Mbit/s for 3 s over IPv4; logger, 200 syslog messages over IPv6)"
TA 30 iperf3 -c "$B4" -u -b 1M -t 3 -l 1200 --logfile "$WORK/iperf3-udp.log"
# (in a UTS namespace of its own, so the messages carry the hostname sensor-01, not this machine's)
# shellcheck disable=SC2016
TA 15 unshare --uts sh -c 'hostname sensor-01 && exec logger --udp --server "$1" --port 514 \
  --rfc5424=notq --tag sensord --file "$2"' sh "$B6" "$WORK/syslog.txt"

# ---------------------------------------------------------------- stop the capture
sleep 1
kill -INT "$TCPDUMP_PID"
wait "$TCPDUMP_PID" || die "tcpdump exited with an error: $(cat "$WORK/tcpdump.log")"
TCPDUMP_PID=''
say "tcpdump: $(grep -E 'captured|dropped by kernel' "$WORK/tcpdump.log" | paste -sd, - | sed 's/,/, /g')"

# sanity: the servers saw what the clients sent
for i in 1 2 3 4 5 6 7 8 9 10; do                # the receivers may still be writing
  cmp -s "$WORK/bulk4.bin" "$WORK/bulk4.recv" && cmp -s "$WORK/bulk6.bin" "$WORK/bulk6.recv" && break
  sleep 0.2
done
cmp -s "$WORK/bulk4.bin" "$WORK/bulk4.recv" || die "IPv4 bulk TCP transfer incomplete"
cmp -s "$WORK/bulk6.bin" "$WORK/bulk6.recv" || die "IPv6 bulk TCP transfer incomplete"
grep -q '200 GET' "$WORK/curl.log" || die "no successful HTTP GET: $(head "$WORK/curl.log")"
# and the capture holds all of it (payload bytes as tcpdump -q reports them)
payload() { tcpdump -n -q -r "$WORK/capture.pcap" "$@" 2>/dev/null | awk '{s += $NF} END {print s + 0}'; }
n=$(payload tcp dst port 9000); ((n >= 2048 * 1024)) || die "capture holds only $n bytes of the 2 MiB stream"
n=$(payload tcp dst port 9001); ((n >= 512 * 1024)) || die "capture holds only $n bytes of the 512 KiB stream"
n=$(tcpdump -n -r "$WORK/capture.pcap" udp dst port 5201 2>/dev/null | wc -l)
((n >= 250)) || die "capture holds only $n iperf3 UDP datagrams"
n=$(tcpdump -n -r "$WORK/capture.pcap" udp dst port 514 2>/dev/null | wc -l)
((n == 200)) || die "capture holds $n of the 200 syslog datagrams"

mkdir -p "$(dirname "$OUT")"
cp "$WORK/capture.pcap" "$OUT.tmp.$$" && chmod 644 "$OUT.tmp.$$" && mv -f "$OUT.tmp.$$" "$OUT"

count() { tcpdump -n -r "$OUT" "$@" 2>/dev/null | wc -l; }
printf '%s: %d packets, %d bytes, %ds of traffic; tcp %d, udp %d, icmp %d, icmp6 %d, ip6 %d, tcp port 80 %d, udp port 53 %d\n' \
  "$OUT" "$(count)" "$(stat -c %s "$OUT")" "$((SECONDS - START))" "$(count tcp)" "$(count udp)" \
  "$(count icmp)" "$(count icmp6)" "$(count ip6)" "$(count tcp port 80)" "$(count udp port 53)"
