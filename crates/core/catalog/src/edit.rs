//! The declarations of `filters::edit`'s filters (their constructors are there).

use crate::{Access, Cost, FilterSpec, Implementation, Kind, Param};

pub static STRIP: FilterSpec = FilterSpec::new("strip", Access::Metadata)
    .unix_tool()
    .synopsis("strip [N|payload]")
    .description("Crops blocks by moving the tag's start: N bytes, or (default) up to the\ntransport payload of a whole frame. A metadata edit: no data is copied.")
    .params(&[
        Param::new("bytes", "bytes to remove, or 'payload' (also positional)").at(0).default("payload"),
    ])
    .classes("the block's class (at least 1)")
    .example("streamline run 'pcapin file=examples/sample.pcap | tcp | dport |80 strip | outfile http.raw'");
pub static DEFLATE: FilterSpec = FilterSpec::new("deflate", Access::Editing)
    .synopsis("deflate [level=0-9] [format=gzip|zlib|raw]")
    .description("Compresses each block on its own into one complete member, a new block that\n\
                  depends on no other: the blocks written back to back are a standard stream of\n\
                  concatenated members (gzip by default: `gzip -dc` and `pigz -dc` read it;\n\
                  format=zlib: `zlib-flate -uncompress` reads it), whatever the placement or\n\
                  the replicas. A gzip member carries no name and no time, so the output depends\n\
                  only on the input. format=raw writes bare deflate data (RFC 1951).")
    .params(&[
        Param::new("level", "compression level, default 6 (also positional)")
            .at(0)
            .kind(Kind::Count)
            .default("6"),
        Param::new("format", "member framing: gzip (RFC 1952), zlib (RFC 1950) or raw")
            .kind(Kind::Choice(&["gzip", "zlib", "raw"]))
            .default("gzip"),
    ])
    .classes("the block's class (at least 1); 0 if it failed")
    .example("streamline run 'file big.bin split=fixed size=64K | deflate space=1,2 | outfile big.z' && gzip -dc big.z | cmp - big.bin");
pub static INFLATE: FilterSpec = FilterSpec::new("inflate", Access::Editing)
    // Measured (2026-11-27, `gen size=4096 | deflate | inflate`): 5 us a block of 4096
    // bytes out, about 3.2 cycles per byte at 2.6 GHz, against deflate's 12.5 us (the
    // editing default of 8 cycles per byte); the model counts the bytes it sends on.
    .implementations(&[Implementation {
        cost: Cost::DEFAULT.per_byte(3.2),
        ..Implementation::NATIVE
    }])
    .synopsis("inflate [max=BYTES] [format=auto|gzip|zlib|raw]")
    .description("Decompresses a stream of concatenated members, gzip or zlib (told apart by\n\
                  each member's header; format=raw for bare deflate data): what deflate writes and\n\
                  what gzip, pigz or zlib-flate write. Members are found in the byte stream, not\n\
                  at block boundaries: a member may span blocks (`file big.z` reads 64 KiB blocks)\n\
                  or a block hold several. Each member's data comes out as one block (cut every\n\
                  max bytes, default 1M), so `deflate | inflate` gives back deflate's blocks.\n\
                  Data that breaks the format (or a gzip CRC that does not match) is dropped to\n\
                  the end of its block with a warning, and the next block starts afresh, so a\n\
                  lost datagram costs only itself. Copies of inflate (space=1,2) each see part of\n\
                  the blocks: replicate it only over blocks that hold whole members (deflate's).")
    .params(&[
        Param::new("max", "largest block out (a longer member is cut)").kind(Kind::Size).default("1M").memory(1),
        Param::new("format", "auto (gzip or zlib, per member), gzip, zlib or raw")
            .kind(Kind::Choice(&["auto", "gzip", "zlib", "raw"]))
            .default("auto"),
    ])
    .classes("the class of the block that completed the member (at least 1); invalid data is dropped")
    .example("streamline run 'file big.z | inflate | outfile big.back'");
/// encrypt's and decrypt's parameters: the key, given or in a file.
const KEY_PARAMS: &[Param] = &[
    Param::new("key", "256-bit key as 64 hex digits")
        .kind(Kind::Hex)
        .secret(),
    Param::new("keyfile", "file holding the key"),
];
pub static ENCRYPT: FilterSpec = FilterSpec::new("encrypt", Access::Editing)
    .synopsis("encrypt key=HEX | keyfile=F")
    .description("Encrypts each block with AES-256-GCM: a new block holding a 12-byte nonce,\nthe ciphertext and the 16-byte authentication tag.")
    .params(KEY_PARAMS)
    .classes("the block's class (at least 1)")
    .example("streamline run 'file secret.txt | encrypt keyfile=k | outfile secret.enc'");
pub static DECRYPT: FilterSpec = FilterSpec::new("decrypt", Access::Editing)
    .synopsis("decrypt key=HEX | keyfile=F")
    .description("Decrypts blocks made by encrypt; blocks failing authentication are dropped\nwith a warning.")
    .params(KEY_PARAMS)
    .classes("the block's class (at least 1); 0 if authentication fails")
    .example("streamline run 'file secret.txt | encrypt keyfile=k | decrypt keyfile=k | outfile copy.txt'");
pub static XOR: FilterSpec = FilterSpec::new("xor", Access::Editing)
    .synopsis("xor KEYHEX")
    .description("XORs each block in place with a repeating key. Edits through write isolation:\nthe block is copied first only if another branch still reads it or it lives in a\nread-only file.")
    .params(&[
        Param::new("key", "key bytes in hex (also positional)").at(0).kind(Kind::Hex).secret(),
    ])
    .classes("the block's class (at least 1)")
    .example("streamline run 'gen count=10 | xor 5a | stdout'");
