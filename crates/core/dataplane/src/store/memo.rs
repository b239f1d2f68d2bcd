//! The block memo: one value derived from a block (a parsed packet) cached per block
//! position, so a chain of filters that need it derives it once ([`Store::memo`]).

use super::Store;
use beltway::Tag;

/// Slots of the block memo (direct-mapped; a batch of 256 blocks fits with room to spare).
const MEMO_SLOTS: usize = 1024;

/// A direct-mapped cache of one derived value per block, keyed by where the block lies.
/// Positions in a DBuf are absolute and never reused (rings never reduce them modulo the
/// size, files do not change), so a key names one content for the life of the space;
/// only an in-place edit changes a block's bytes under the same key, and
/// [`Store::writable`] clears the memo when it hands out one.
struct MemoTable<T> {
    keys: Vec<MemoKey>,
    vals: Vec<Option<T>>,
}

type MemoKey = (u64, u32, u32);

fn memo_key(t: &Tag) -> (MemoKey, usize) {
    let slot = (t.pos ^ (t.pos >> 10) ^ (t.buf as u64).wrapping_mul(0x9e37_79b9)) as usize
        & (MEMO_SLOTS - 1);
    ((t.pos, t.len, u32::from(t.buf)), slot)
}

/// The memo table with its value type erased.
pub(super) trait MemoAny: Send {
    fn clear(&mut self, key: MemoKey, slot: usize);
    fn as_any(&mut self) -> &mut dyn std::any::Any;
}

impl<T: Send + 'static> MemoAny for MemoTable<T> {
    fn clear(&mut self, key: MemoKey, slot: usize) {
        if self.keys[slot] == key {
            self.vals[slot] = None;
        }
    }
    fn as_any(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

impl std::fmt::Debug for dyn MemoAny {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoTable")
    }
}

impl Store {
    /// A value derived from block `t` (e.g. a parsed packet), computed by `f` at most once
    /// while it stays cached, so a chain of filters that all need it derives it once.
    /// One memo type per space is cached at a time (another type replaces it).
    #[inline]
    pub fn memo<T: Copy + Send + 'static>(&self, t: &Tag, f: impl FnOnce() -> T) -> T {
        let (key, slot) = memo_key(t);
        let mut cell = self.memo.borrow_mut();
        if !cell
            .as_mut()
            .is_some_and(|b| b.as_any().is::<MemoTable<T>>())
        {
            *cell = Some(Box::new(MemoTable::<T> {
                keys: vec![(u64::MAX, 0, 0); MEMO_SLOTS],
                vals: (0..MEMO_SLOTS).map(|_| None).collect(),
            }));
        }
        let table = cell
            .as_mut()
            .and_then(|b| b.as_any().downcast_mut::<MemoTable<T>>())
            .expect("just created");
        if table.keys[slot] == key {
            if let Some(v) = table.vals[slot] {
                return v;
            }
        }
        drop(cell);
        let v = f();
        let mut cell = self.memo.borrow_mut();
        if let Some(table) = cell
            .as_mut()
            .and_then(|b| b.as_any().downcast_mut::<MemoTable<T>>())
        {
            table.keys[slot] = key;
            table.vals[slot] = Some(v);
        }
        v
    }

    /// Forget what was memoized about block `t` (it is about to change in place; being
    /// exclusive, no other tag reads its bytes).
    pub(super) fn forget_memo(&mut self, t: &Tag) {
        if let Some(m) = self.memo.get_mut().as_mut() {
            let (key, slot) = memo_key(t);
            m.clear(key, slot);
        }
    }
}
