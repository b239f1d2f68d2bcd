use super::external::Lender;
use super::*;

#[test]
fn ring_positions_and_overwrite() {
    let mut r = LocalRing::new(4096);
    let (p0, s) = r.alloc(1000);
    s.fill(1);
    assert_eq!(p0, 0);
    let (p1, _) = r.alloc(1000);
    assert_eq!(p1, 1000);
    let (p2, _) = r.alloc(2000);
    assert_eq!(p2, 2000);
    assert!(
        r.get(p0, 1000).is_some(),
        "still intact: one lap not yet written"
    );
    let (p3, _) = r.alloc(2000); // does not fit before the lap end: skips to 4096
    assert_eq!(p3, 4096);
    assert!(r.get(p0, 1000).is_none(), "overwritten by the next lap");
    assert!(r.get(p2, 2000).is_some());
    assert!(r.get(p3, 2000).is_some());
    assert!(r.get(p3, 2001).is_none(), "beyond what was written");
}

#[test]
fn writable_copies_only_when_shared() {
    let mut st = Store::new(1 << 16);
    let mut t = st.push(b"hello");
    let before = t;
    let (s, copied) = st.writable(&mut t, true).unwrap();
    s[0] = b'j';
    assert!(!copied);
    assert_eq!(t, before);
    let (s, copied) = st.writable(&mut t, false).unwrap();
    s[0] = b'm';
    assert!(copied);
    assert_ne!(t.pos, before.pos);
    assert_eq!(st.data(&before).unwrap(), b"jello");
    assert_eq!(st.data(&t).unwrap(), b"mello");
}

#[test]
fn a_reusing_ring_notes_in_place_edits() {
    let mut st = Store::new(1 << 16);
    let (id, size) = st.add_reusing_ring(1 << 12);
    assert_eq!(size, Some(4096));
    let (mut t, s) = st.alloc_in(id, 5);
    s.copy_from_slice(b"hello");
    assert!(!st.take_edited(id));
    // A shared block is copied: the ring's bytes stay, nothing to note.
    let mut c = t;
    st.writable(&mut c, false).unwrap().0[0] = b'm';
    assert!(!st.take_edited(id));
    // An exclusive one is edited in place, and that is noted once.
    let (s, copied) = st.writable(&mut t, true).unwrap();
    s[0] = b'j';
    assert!(!copied);
    assert_eq!(st.data(&t).unwrap(), b"jello");
    assert!(st.take_edited(id));
    assert!(!st.take_edited(id), "taken");
    // An ordinary ring notes nothing.
    let plain = st.add_ring(1 << 12);
    let (mut p, _) = st.alloc_in(plain, 5);
    st.writable(&mut p, true).unwrap();
    assert!(!st.take_edited(plain));
    // Once rings are shared, a reusing ring is shared and reused alike: an exclusive
    // block that no channel was given is edited in place, and that is noted.
    st.share_rings();
    let (sid, size) = st.add_reusing_ring(1 << 12);
    assert_eq!(size, Some(4096));
    let (mut t, s) = st.alloc_in(sid, 5);
    s.copy_from_slice(b"hello");
    assert!(!st.take_edited(sid));
    let (s, copied) = st.writable(&mut t, true).unwrap();
    s[0] = b'j';
    assert!(!copied);
    assert_eq!(st.data(&t).unwrap(), b"jello");
    assert!(st.take_edited(sid));
    assert!(!st.take_edited(sid), "taken");
}

/// A store with a private ring two laps in (some tags gone) and a mapped file.
fn store_with_regions() -> (Store, BufId, BufId, std::fs::File) {
    let mut st = Store::new(1 << 12);
    let ring = st.add_ring(1 << 12);
    for i in 0..9u8 {
        let (_, s) = st.alloc_in(ring, 1000);
        s.fill(i);
    }
    // A memfd (gone with the test), opened by its /proc path.
    let fd = beltway::sys::memfd_create("store-test", 0).unwrap();
    let mut f = std::fs::File::from(fd);
    std::io::Write::write_all(&mut f, &(0..5000u32).map(|i| i as u8).collect::<Vec<_>>()).unwrap();
    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&f));
    let (file, _) = st.add_file(Path::new(&path)).unwrap();
    (st, ring, file, f)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 2000, ..Default::default() })]
    /// The resolver gives exactly what `data` gives, for any tags in any order: in
    /// a ring (intact, overwritten, beyond the write position, wrapping the ring's
    /// end), in a file (inside, past its end), in unknown buffers, at hostile
    /// positions near u64::MAX.
    #[test]
    fn the_resolver_agrees_with_data(tags in proptest::collection::vec(
        (0u16..5, proptest::prop_oneof![0u64..20_000, (u64::MAX - 5000)..=u64::MAX], 0u32..5000), 1..40)) {
        let (st, ring, file, _f) = store_with_regions();
        proptest::prop_assert_eq!((ring, file), (1, 2));
        let mut r = st.resolver();
        for (buf, pos, len) in tags {
            let t = Tag { pos, len, buf, class: 1 };
            proptest::prop_assert_eq!(r.data(&t), st.data(&t), "tag {:?}", t);
        }
    }

    /// A lent region resolves a tag exactly when it lies in the block lent now (its
    /// generation, inside the block), to that block's bytes, and `keep` copies exactly
    /// those: stale, future and hostile positions are Gone, never other bytes or a
    /// panic.
    #[test]
    fn lent_tags_resolve_only_in_the_block_lent_now(laps in 0u64..5, tags in proptest::collection::vec(
        (proptest::prop_oneof![0u64..30_000, (u64::MAX - 5000)..=u64::MAX], 0u32..5000), 1..40)) {
        let mut st = Store::new(1 << 16);
        let mut lender = Lender::new(4096);
        for _ in 0..laps {
            lender.give_back();
        }
        let id = st.add_external(lender);
        let lender = st.external::<Lender>(id).expect("the lender, as its own type");
        let now = lender.pos(0) / 4096;
        let lent: Vec<u8> = lender.bytes(0, 4096);
        for (pos, len) in tags {
            let t = Tag { pos, len, buf: id, class: 1 };
            let (g, off) = (pos / 4096, (pos % 4096) as usize);
            let lent_now = g == now && off + len as usize <= 4096;
            let want = if lent_now { Ok(lent[off..off + len as usize].to_vec()) } else { Err(ResolveError::Gone { buf: id, pos }) };
            proptest::prop_assert_eq!(st.data(&t).map(<[u8]>::to_vec), want.clone(), "tag {:?}", t);
            proptest::prop_assert_eq!(st.resolver().data(&t).map(<[u8]>::to_vec), want.clone());
            let kept = st.keep(&t).and_then(|k| st.data(&k).map(<[u8]>::to_vec));
            proptest::prop_assert_eq!(kept, want);
        }
    }
}

#[test]
fn keep_leaves_files_and_own_rings_in_place_and_copies_lent_blocks_with_their_record() {
    let (mut st, ring, file, _f) = store_with_regions();
    // A file stays: the tag itself.
    let t = Tag {
        pos: 100,
        len: 50,
        buf: file,
        class: 3,
    };
    assert_eq!(st.keep(&t), Ok(t));
    // A ring of this space: in place while intact; a block a later lap overwrote
    // cannot be kept.
    let intact = Tag {
        pos: 8192,
        len: 1000,
        buf: ring,
        class: 1,
    };
    assert_eq!(st.keep(&intact), Ok(intact));
    assert_eq!(
        st.keep(&Tag {
            pos: 0,
            len: 1000,
            buf: ring,
            class: 1
        }),
        Err(ResolveError::Gone { buf: ring, pos: 0 })
    );
    assert_eq!(st.kept, 0, "nothing copied so far");
    // Lent memory: a copy, with the tag's class, the record it is a cropped piece of
    // (its time, wire length and the bytes before it) and the link type.
    let lender = Lender::new(4096);
    let (pos0, pos40, want) = (lender.pos(0), lender.pos(40), lender.bytes(40, 60));
    let id = st.add_external(lender);
    assert!(
        st.external::<Lender>(ring).is_none()
            && st.external_mut::<Lender>(ring).is_none()
            && st.external::<Lender>(99).is_none(),
        "a ring, an unknown id: no lender"
    );
    st.set_link(id, 1);
    st.set_records(id, vec![RecordMeta::whole(pos0, 200, 777, 1500)]);
    let seg = Tag {
        pos: pos40,
        len: 60,
        buf: id,
        class: 9,
    };
    assert_eq!(st.data(&seg).unwrap(), &want[..]);
    let k = st.keep(&seg).unwrap();
    assert_ne!(k.buf, id);
    assert_eq!(k.class, 9);
    assert_eq!(st.kept, 1);
    // The block goes back and is lent again with other bytes: the original tag is
    // refused (never the new bytes), the copy still reads what the tag saw.
    let lender = st
        .external_mut::<Lender>(id)
        .expect("the lender, as its own type");
    lender.give_back();
    assert_ne!(lender.bytes(40, 60), want);
    assert_eq!(
        st.data(&seg),
        Err(ResolveError::Gone {
            buf: id,
            pos: seg.pos
        })
    );
    assert_eq!(
        st.resolver().data(&seg),
        Err(ResolveError::Gone {
            buf: id,
            pos: seg.pos
        })
    );
    assert_eq!(st.data(&k).unwrap(), &want[..]);
    assert_eq!(
        st.record(&k),
        Some((
            RecordMeta {
                pos: k.pos,
                len: 60,
                skip: 40,
                ts_ns: 777,
                orig_len: 1500
            },
            false
        ))
    );
    assert_eq!(st.link(&k), Some(1));
    // Too late to keep it now.
    assert_eq!(
        st.keep(&seg),
        Err(ResolveError::Gone {
            buf: id,
            pos: seg.pos
        })
    );
    // A copy is this space's: keeping it again keeps it in place.
    assert_eq!(st.keep(&k), Ok(k));
    assert_eq!(st.kept, 1);
    assert_eq!(
        st.keep(&Tag { buf: 99, ..k }),
        Err(ResolveError::UnknownBuffer(99))
    );
}

#[test]
fn memo_derives_once_and_forgets_in_place_edits() {
    let mut st = Store::new(1 << 16);
    let mut t = st.push(b"abc");
    let first = |st: &Store, t: &Tag| st.memo(t, || st.data(t).unwrap()[0]);
    assert_eq!(first(&st, &t), b'a');
    // Cached: the closure is not run again.
    assert_eq!(st.memo(&t, || -> u8 { panic!("derived twice") }), b'a');
    // A cropped tag is another block.
    let cropped = Tag {
        pos: t.pos + 1,
        len: 2,
        ..t
    };
    assert_eq!(first(&st, &cropped), b'b');
    let (s, copied) = st.writable(&mut t, true).unwrap();
    assert!(!copied);
    s[0] = b'z';
    assert_eq!(
        first(&st, &t),
        b'z',
        "an in-place edit must not leave a stale memo"
    );
    // Another value type replaces the table.
    assert_eq!(st.memo(&t, || 7u32), 7);
    assert_eq!(first(&st, &t), b'z');
}

proptest::proptest! {
    /// The one bounds check agrees with exact arithmetic for every input, overflow
    /// included, and a slice it admits is exactly the bytes asked for.
    #[test]
    fn bounds_agree_with_exact_arithmetic(lo in proptest::prop_oneof![0u64..64, proptest::num::u64::ANY], hi in proptest::prop_oneof![0u64..64, proptest::num::u64::ANY], pos in proptest::prop_oneof![0u64..64, proptest::num::u64::ANY], len in proptest::prop_oneof![0u64..64, proptest::num::u64::ANY]) {
        let exact = pos as u128 >= lo as u128 && pos as u128 + len as u128 <= hi as u128;
        proptest::prop_assert_eq!(Bounds { lo, hi }.holds(pos, len), exact);
        let bytes: Vec<u8> = (0..hi.min(64) as u8).collect();
        let got = Bounds::upto(bytes.len() as u64).slice(&bytes, pos, len as usize);
        let want = (pos as u128 + len as u128 <= bytes.len() as u128).then(|| &bytes[pos as usize..(pos + len) as usize]);
        proptest::prop_assert_eq!(got, want);
    }
}

#[test]
fn a_ring_holds_its_last_lap_only() {
    let mut r = LocalRing::new(4096);
    r.alloc(2000);
    assert_eq!(r.bounds(), Bounds { lo: 0, hi: 2000 });
    r.alloc(2000);
    r.alloc(2000);
    // The third block skipped to the next lap: positions 4096..6096 are the newest.
    assert_eq!(
        r.bounds(),
        Bounds {
            lo: 6096 - 4096,
            hi: 6096
        }
    );
    assert!(r.get(1999, 2).is_none() && r.get(2000, 2000).is_some() && r.get(6095, 2).is_none());
}
