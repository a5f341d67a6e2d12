//! Host-side frame buffers: a fixed arena of frame slots reused for every
//! batch (no allocation per packet), and the per-queue backlog that carries
//! frames from the switch to a VM port's worker.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Bytes per frame slot; every frame vadapt forwards fits (see [`crate::net::MAX_FRAME`]).
pub const SLOT: usize = 2048;

/// Slots the arena grows by at least, so a port that starts carrying traffic
/// reallocates a few times, not once per frame.
const GROW_MIN: usize = 32;

/// A batch of frames in one contiguous arena of [`SLOT`]-sized slots.
///
/// The arena grows as frames arrive, up to the highest number of frames the
/// batch has held, and keeps that size: an idle port's backlogs hold no
/// frame memory (a 1024-frame backlog allocated up front is 2 MiB per queue,
/// which `vadapt bench --only b7` measured as about 2.3 MiB of resident memory
/// per idle port), and a busy one stops allocating once it reached its
/// high-water mark.
#[derive(Debug)]
pub struct FrameBatch {
    data: Vec<u8>,
    lens: Vec<u16>,
    cap: usize,
}

impl FrameBatch {
    /// An empty batch of at most `cap` frames.
    pub fn new(cap: usize) -> Self {
        FrameBatch {
            data: Vec::new(),
            lens: Vec::with_capacity(cap),
            cap,
        }
    }

    /// Frames held.
    pub fn len(&self) -> usize {
        self.lens.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    /// True when no slot is left.
    pub fn is_full(&self) -> bool {
        self.lens.len() == self.cap
    }

    /// Capacity in frames.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Drop every frame.
    pub fn clear(&mut self) {
        self.lens.clear();
    }

    /// The next free slot, to be filled and then [`commit`](Self::commit)ted.
    pub fn next_slot(&mut self) -> Option<&mut [u8]> {
        let i = self.lens.len();
        if i >= self.cap {
            return None;
        }
        let end = (i + 1) * SLOT;
        if self.data.len() < end {
            self.grow(i + 1);
        }
        Some(&mut self.data[i * SLOT..end])
    }

    /// Grow the arena to hold at least `slots` frames: double, at least
    /// [`GROW_MIN`] slots, at most the capacity.
    #[cold]
    fn grow(&mut self, slots: usize) {
        let n = slots
            .max(2 * (self.data.len() / SLOT))
            .max(GROW_MIN)
            .min(self.cap);
        self.data.resize(n * SLOT, 0);
    }

    /// Bytes of frame memory the arena holds now.
    pub fn arena_bytes(&self) -> usize {
        self.data.len()
    }

    /// Make the frame written into [`next_slot`](Self::next_slot) part of the batch.
    ///
    /// # Panics
    /// If the batch is full or `len > SLOT` (caller bugs, not guest input).
    pub fn commit(&mut self, len: usize) {
        assert!(!self.is_full() && len <= SLOT);
        self.lens.push(len as u16);
    }

    /// Copy `frame` into the batch; false when full or too long.
    pub fn push(&mut self, frame: &[u8]) -> bool {
        if frame.len() > SLOT {
            return false;
        }
        match self.next_slot() {
            Some(slot) => {
                slot[..frame.len()].copy_from_slice(frame);
                self.commit(frame.len());
                true
            }
            None => false,
        }
    }

    /// Frame `i`.
    pub fn get(&self, i: usize) -> &[u8] {
        &self.data[i * SLOT..i * SLOT + self.lens[i] as usize]
    }

    /// Length of frame `i`, bytes (without touching its bytes).
    pub fn frame_len(&self, i: usize) -> usize {
        usize::from(self.lens[i])
    }

    /// Frame `i`, mutable.
    pub fn get_mut(&mut self, i: usize) -> &mut [u8] {
        let len = self.lens[i] as usize;
        &mut self.data[i * SLOT..i * SLOT + len]
    }

    /// Total bytes of all frames.
    pub fn bytes(&self) -> u64 {
        self.lens.iter().map(|&l| u64::from(l)).sum()
    }
}

/// Frames waiting to be delivered into one receive queue of a VM port.
///
/// Many producers (other ports' workers) push batches under the lock; the one
/// consumer swaps the whole buffer out under the lock and copies frames into
/// the guest without holding it.
#[derive(Debug)]
pub struct Backlog {
    inner: Mutex<FrameBatch>,
    /// Frames held, kept under the lock, read without it: a polling worker
    /// checks an empty backlog millions of times a second without locking.
    len: AtomicUsize,
}

impl Backlog {
    /// A backlog of at most `cap` frames.
    pub fn new(cap: usize) -> Self {
        Backlog {
            inner: Mutex::new(FrameBatch::new(cap)),
            len: AtomicUsize::new(0),
        }
    }

    /// Append frames `which` of `src`; returns (accepted, dropped because full).
    pub fn push(&self, src: &FrameBatch, which: &[u16]) -> (u64, u64) {
        let mut q = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut ok = 0;
        for &i in which {
            if !q.push(src.get(usize::from(i))) {
                break;
            }
            ok += 1;
        }
        self.len.store(q.len(), Ordering::Release);
        (ok, which.len() as u64 - ok)
    }

    /// Swap the backlog's frames into `out` (which must be empty and of the
    /// same capacity); returns the number of frames taken.
    pub fn take_into(&self, out: &mut FrameBatch) -> usize {
        debug_assert!(out.is_empty());
        if self.len.load(Ordering::Acquire) == 0 {
            return 0;
        }
        let mut q = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::swap(&mut *q, out);
        self.len.store(0, Ordering::Release);
        out.len()
    }

    /// Most frames held.
    pub fn capacity(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .capacity()
    }

    /// True when frames are waiting.
    pub fn has_frames(&self) -> bool {
        !self
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Drop every waiting frame (port reset); returns how many.
    pub fn clear(&self) -> usize {
        let mut q = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let n = q.len();
        q.clear();
        self.len.store(0, Ordering::Release);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_push_get_and_limits() {
        let mut b = FrameBatch::new(2);
        assert!(b.push(&[1, 2, 3]));
        assert!(!b.push(&vec![0; SLOT + 1]));
        assert!(b.push(&[4]));
        assert!(b.is_full());
        assert!(!b.push(&[5]));
        assert_eq!(b.get(0), &[1, 2, 3]);
        assert_eq!(b.bytes(), 4);
        b.get_mut(1)[0] = 9;
        assert_eq!(b.get(1), &[9]);
    }

    #[test]
    fn backlog_counts_overflow_and_swaps_out() {
        let bl = Backlog::new(2);
        let mut src = FrameBatch::new(4);
        for i in 0..3u8 {
            src.push(&[i; 20]);
        }
        assert_eq!(bl.push(&src, &[0, 1, 2]), (2, 1));
        let mut out = FrameBatch::new(2);
        assert_eq!(bl.take_into(&mut out), 2);
        assert_eq!(out.get(1), &[1; 20]);
        assert!(!bl.has_frames());
    }

    #[test]
    fn arena_grows_to_the_high_water_mark_and_keeps_it() {
        let mut b = FrameBatch::new(1024);
        assert_eq!(b.arena_bytes(), 0, "an idle batch holds no frame memory");
        for i in 0..40u8 {
            assert!(b.push(&[i; 60]));
        }
        // 32 slots, then doubled to 64: never one reallocation per frame.
        assert_eq!(b.arena_bytes(), 64 * SLOT);
        assert_eq!(b.get(39), &[39; 60]);
        assert_eq!(b.get(0), &[0; 60], "frames survive the growth");
        b.clear();
        assert!(b.push(&[7; 60]));
        assert_eq!(
            b.arena_bytes(),
            64 * SLOT,
            "cleared batches keep their arena"
        );
        for _ in 1..1024 {
            assert!(b.push(&[1; 60]));
        }
        assert_eq!(b.arena_bytes(), 1024 * SLOT, "never beyond the capacity");
        assert!(!b.push(&[1; 60]));
    }
}
