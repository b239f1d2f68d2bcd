//! Shared test helpers: a watchdog for tests that could deadlock, and deterministic data.
#![allow(dead_code)]

#[allow(unused_imports)]
pub use beltway::testing::watchdog;

/// Byte `i` of the reference stream.
#[inline]
pub fn stream_byte(i: u64) -> u8 {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8 ^ (i as u8)
}

pub fn fill_stream(start: u64, buf: &mut [u8]) {
    for (k, b) in buf.iter_mut().enumerate() {
        *b = stream_byte(start + k as u64);
    }
}

pub fn check_stream(start: u64, buf: &[u8]) -> bool {
    buf.iter()
        .enumerate()
        .all(|(k, b)| *b == stream_byte(start + k as u64))
}

/// A self-validating record: seq (8) | len (4) | crc of payload (4) | payload.
pub fn make_record(seq: u64, len: usize) -> Vec<u8> {
    let len = len.max(16);
    let mut v = vec![0u8; len];
    fill_stream(seq.wrapping_mul(7919), &mut v[16..]);
    let crc = crc32fast::hash(&v[16..]);
    v[..8].copy_from_slice(&seq.to_le_bytes());
    v[8..12].copy_from_slice(&(len as u32).to_le_bytes());
    v[12..16].copy_from_slice(&crc.to_le_bytes());
    v
}

/// Validate a record; returns its sequence number.
pub fn parse_record(r: &[u8]) -> Result<u64, String> {
    if r.len() < 16 {
        return Err(format!(
            "record of {} bytes is shorter than its header",
            r.len()
        ));
    }
    let seq = u64::from_le_bytes(r[..8].try_into().unwrap());
    let len = u32::from_le_bytes(r[8..12].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(r[12..16].try_into().unwrap());
    if len != r.len() {
        return Err(format!(
            "record {seq}: length field {len} but {} bytes",
            r.len()
        ));
    }
    if crc32fast::hash(&r[16..]) != crc {
        return Err(format!("record {seq}: checksum mismatch"));
    }
    Ok(seq)
}

/// Record length for sequence number `seq` (varied, within `max`).
pub fn record_len(seq: u64, max: usize) -> usize {
    let l = 16 + (seq.wrapping_mul(2654435761) % 1500) as usize;
    l.min(max).max(16)
}
