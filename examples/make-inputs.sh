#!/usr/bin/env bash
# The inputs the README's examples read, made in the current directory (run it from the
# repository root):
#   big.bin    8 MiB to compress: examples/sample.pcap twice (packets: partly compressible)
#   key        an AES-256 key for encrypt/decrypt keyfile=: 64 hex digits from /dev/urandom
#   shapeprog  a statically linked program (crates/tools/cli/tests/c/shapeprog.c, `cc -static`),
#              for `streamline shape`'s kernel mechanism
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cat "$root/examples/sample.pcap" "$root/examples/sample.pcap" > big.bin
truncate -s 8388608 big.bin
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > key
chmod 600 key
cc -static -O2 -o shapeprog "$root/crates/tools/cli/tests/c/shapeprog.c"
echo "inputs: big.bin ($(stat -c %s big.bin) bytes), key, shapeprog"
