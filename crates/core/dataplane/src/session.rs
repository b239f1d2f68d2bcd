//! Per-class session state (thesis 3.3.2 `slsession_alloc`, 5.3.3): a filter asks for N
//! slots of its session type; the runtime hands it the slot of each block's class. Keeping
//! state keyed by class is what lets a stateful filter be replicated across spaces later
//! (every block of a session reaches the replica that holds its state).

/// N session slots of `T`, selected by class.
#[derive(Debug, Clone)]
pub struct SessionTable<T> {
    slots: Vec<T>,
}

impl<T: Default + Clone> SessionTable<T> {
    pub fn new(n: usize) -> SessionTable<T> {
        SessionTable {
            slots: vec![T::default(); n.max(1)],
        }
    }
}

impl<T> SessionTable<T> {
    /// The slot for `class` (classes beyond N share slots modulo N).
    #[inline]
    pub fn get(&mut self, class: u16) -> &mut T {
        let n = self.slots.len();
        &mut self.slots[class as usize % n]
    }
    pub fn iter(&self) -> impl Iterator<Item = (usize, &T)> {
        self.slots.iter().enumerate()
    }
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (usize, &mut T)> {
        self.slots.iter_mut().enumerate()
    }
    pub fn len(&self) -> usize {
        self.slots.len()
    }
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}
