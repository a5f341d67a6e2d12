//! Host-side frame buffers: a fixed arena of frame slots reused for every
//! batch (no allocation per packet), and the per-queue backlog that carries
//! frames from the switch to a VM port's worker.
//!
//! Most frames are plain (no offload asked) and at most [`SLOT`] bytes:
//! they live in the slots and carry no metadata, so the fast path is a
//! length per frame and a copy. A frame whose virtio-net header asked for
//! an offload that was kept for the egress (issue #15: a partial checksum,
//! or a TCP segment of up to 64 KiB that a receiver with `GUEST_TSO*` takes
//! whole) is *marked*: a flag bit in its length, and an [`Offloaded`] entry
//! beside the slots with its checked header. A *large* frame, one that does
//! not fit a slot — a GSO frame, or a jumbo frame of a port with an MTU
//! over 2030 (issue 26) — has its bytes in a side store, and is marked too,
//! a plain one with [`Offloaded::plain`], which [`FrameBatch::offloaded`]
//! does not show: to every egress a jumbo frame is a plain frame. Only
//! marked frames pay for the lookup, which is why the side store is not
//! per frame: issue #16 needs the small-frame path as it was.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use vadapt_wire::{Offload, VnetHdr};

/// Bytes per frame slot: every frame of a port of the default MTU fits (see
/// [`crate::net::MAX_FRAME`]); larger ones go into the side store.
pub const SLOT: usize = 2048;

/// Set in a frame's length when it has an [`Offloaded`] entry.
const MARKED: u16 = 0x8000;

/// The offload kept with a marked frame for its egress: what the sender's
/// header asked, checked at ingress against the frame (every offset lies
/// inside it, and a GSO frame is the TCP segment it claims to be).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offloaded {
    /// What the egress must do if its receiver cannot take the offload.
    pub offload: Offload,
    /// The header to hand a receiver that takes it: rebuilt from the
    /// checked fields (no stray flags, `hdr_len` as measured).
    pub hdr: VnetHdr,
    /// Frames it makes when cut (1 unless it is a GSO frame): what the
    /// sender's counters and policy count, as before the frame crossed
    /// whole.
    pub cut_frames: u32,
    /// Their bytes (the headers repeated in each segment).
    pub cut_bytes: u32,
}

impl Offloaded {
    /// The mark of a plain frame of `len` bytes that is in the side store
    /// only because it does not fit a slot: no offload, a zero header, one
    /// frame when "cut".
    pub fn plain(len: usize) -> Self {
        Offloaded {
            offload: Offload::None,
            hdr: VnetHdr::default(),
            cut_frames: 1,
            // A frame is < 64 KiB + 18 bytes.
            cut_bytes: len as u32,
        }
    }

    /// True if it asks the egress for something (not [`Offloaded::plain`]).
    fn asks(&self) -> bool {
        !matches!(self.offload, Offload::None)
    }
}

/// A marked frame's entry: which frame, its offload, where its bytes are.
#[derive(Clone, Copy, Debug)]
struct Mark {
    /// Index of the frame in the batch.
    frame: u32,
    offloaded: Offloaded,
    /// `Some((start, len))` in the side store (bytes), `None`: in the slot.
    side: Option<(usize, usize)>,
}

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
    /// Frame lengths, bytes; with [`MARKED`] set the frame has a [`Mark`].
    lens: Vec<u16>,
    cap: usize,
    /// Marked frames, in frame order.
    marks: Vec<Mark>,
    /// Marks that ask the egress for an offload (not only large plain frames).
    offloads: usize,
    /// GSO frames' bytes, back to back (empty until one comes).
    side: Vec<u8>,
    /// Bytes of `side` that belong to committed frames.
    side_committed: usize,
}

impl FrameBatch {
    /// An empty batch of at most `cap` frames.
    pub fn new(cap: usize) -> Self {
        FrameBatch {
            data: Vec::new(),
            lens: Vec::with_capacity(cap),
            cap,
            marks: Vec::new(),
            offloads: 0,
            side: Vec::new(),
            side_committed: 0,
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
        if !self.marks.is_empty() {
            self.marks.clear();
            self.offloads = 0;
            self.side.clear();
            self.side_committed = 0;
        }
    }

    /// Most bytes of large frames the side store holds: what the slots of a
    /// full batch hold, and at least one largest GSO frame.
    pub fn side_capacity(&self) -> usize {
        (self.cap * SLOT).max(crate::net::MAX_GSO_FRAME)
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

    /// As [`commit`](Self::commit), for a frame whose offload the egress
    /// must see.
    ///
    /// # Panics
    /// As [`commit`](Self::commit).
    pub fn commit_offloaded(&mut self, len: usize, offloaded: Offloaded) {
        assert!(!self.is_full() && len <= SLOT);
        self.offloads += usize::from(offloaded.asks());
        self.marks.push(Mark {
            frame: self.lens.len() as u32,
            offloaded,
            side: None,
        });
        self.lens.push(len as u16 | MARKED);
    }

    /// Room for a large frame (a GSO frame, or any frame over a slot) of
    /// `len` bytes in the side store, to be filled and then
    /// [`commit_large`](Self::commit_large)ed; `None` when the batch or the
    /// side store is full (flush first) or `len` is beyond
    /// [`MAX_GSO_FRAME`](crate::net::MAX_GSO_FRAME).
    pub fn next_large(&mut self, len: usize) -> Option<&mut [u8]> {
        if self.is_full()
            || len > crate::net::MAX_GSO_FRAME
            || self.side_committed + len > self.side_capacity()
        {
            return None;
        }
        let start = self.side_committed;
        self.side.resize(start + len, 0);
        Some(&mut self.side[start..])
    }

    /// Makes the frame written into [`next_large`](Self::next_large) (all
    /// its `len` bytes) part of the batch, with its offload
    /// ([`Offloaded::plain`] for a plain frame).
    ///
    /// # Panics
    /// If [`next_large`](Self::next_large) did not just hand out `len` bytes.
    pub fn commit_large(&mut self, offloaded: Offloaded) {
        let (start, end) = (self.side_committed, self.side.len());
        assert!(
            start < end && !self.is_full(),
            "commit_large without next_large"
        );
        self.side_committed = end;
        self.offloads += usize::from(offloaded.asks());
        self.marks.push(Mark {
            frame: self.lens.len() as u32,
            offloaded,
            side: Some((start, end - start)),
        });
        self.lens.push(MARKED);
    }

    /// Copies frame `i` of `src` in, with its offload; false when the
    /// batch (or, for a GSO frame, the side store) is full.
    pub fn push_from(&mut self, src: &FrameBatch, i: usize) -> bool {
        let Some(m) = src.mark(i) else {
            return self.push(src.get(i));
        };
        let frame = src.get(i);
        if m.side.is_some() {
            match self.next_large(frame.len()) {
                Some(dst) => dst.copy_from_slice(frame),
                None => return false,
            }
            self.commit_large(m.offloaded);
            return true;
        }
        match self.next_slot() {
            Some(slot) => slot[..frame.len()].copy_from_slice(frame),
            None => return false,
        }
        self.commit_offloaded(frame.len(), m.offloaded);
        true
    }

    /// Copies frame `i` of `src` in as `edit` makes it: `edit` writes the
    /// new frame, `len` bytes, from the old; `reoffload` moves its kept
    /// offload to match (`None`: the offload cannot follow the edit, and
    /// nothing is copied). False when nothing was copied: the batch or the
    /// side store is full, or `reoffload` refused. Used to push and pop
    /// VLAN tags ([`crate::switch`]).
    pub fn push_edited(
        &mut self,
        src: &FrameBatch,
        i: usize,
        len: usize,
        edit: impl FnOnce(&[u8], &mut [u8]),
        reoffload: impl FnOnce(Offloaded) -> Option<Offloaded>,
    ) -> bool {
        let frame = src.get(i);
        let mark = match src.mark(i) {
            Some(m) if m.offloaded.asks() => match reoffload(m.offloaded) {
                Some(o) => Some(o),
                None => return false,
            },
            _ => None,
        };
        if len > SLOT {
            let Some(dst) = self.next_large(len) else {
                return false;
            };
            edit(frame, &mut dst[..len]);
            self.commit_large(mark.unwrap_or_else(|| Offloaded::plain(len)));
            return true;
        }
        let Some(slot) = self.next_slot() else {
            return false;
        };
        edit(frame, &mut slot[..len]);
        match mark {
            Some(o) => self.commit_offloaded(len, o),
            None => self.commit(len),
        }
        true
    }

    /// Frame `i`'s entry if it is marked.
    fn mark(&self, i: usize) -> Option<&Mark> {
        if self.lens[i] & MARKED == 0 {
            return None;
        }
        self.marks
            .binary_search_by_key(&(i as u32), |m| m.frame)
            .ok()
            .map(|k| &self.marks[k])
    }

    /// The offload kept with frame `i` for its egress, if any (a large
    /// plain frame has none).
    #[inline]
    pub fn offloaded(&self, i: usize) -> Option<Offloaded> {
        if self.offloads == 0 {
            return None;
        }
        self.mark(i).map(|m| m.offloaded).filter(Offloaded::asks)
    }

    /// True if some frame of the batch has an offload kept for its egress.
    pub fn has_offloads(&self) -> bool {
        self.offloads > 0
    }

    #[cold]
    fn get_marked(&self, i: usize) -> &[u8] {
        let m = self.mark(i).expect("a marked frame has its entry");
        match m.side {
            Some((start, len)) => &self.side[start..start + len],
            None => &self.data[i * SLOT..i * SLOT + usize::from(self.lens[i] & !MARKED)],
        }
    }

    /// Copy plain `frame` into the batch, into the side store if it is
    /// over a slot; false when the batch (or the side store) is full or the
    /// frame is beyond [`MAX_GSO_FRAME`](crate::net::MAX_GSO_FRAME).
    pub fn push(&mut self, frame: &[u8]) -> bool {
        if frame.len() > SLOT {
            return match self.next_large(frame.len()) {
                Some(dst) => {
                    dst.copy_from_slice(frame);
                    self.commit_large(Offloaded::plain(frame.len()));
                    true
                }
                None => false,
            };
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
    #[inline]
    pub fn get(&self, i: usize) -> &[u8] {
        let len = self.lens[i];
        if len & MARKED != 0 {
            return self.get_marked(i);
        }
        &self.data[i * SLOT..i * SLOT + len as usize]
    }

    /// Length of frame `i`, bytes (without touching its bytes).
    #[inline]
    pub fn frame_len(&self, i: usize) -> usize {
        let len = self.lens[i];
        if len & MARKED != 0 {
            return self.get_marked(i).len();
        }
        usize::from(len)
    }

    /// Frame `i`, mutable.
    pub fn get_mut(&mut self, i: usize) -> &mut [u8] {
        let len = self.lens[i];
        if len & MARKED != 0 {
            let m = *self.mark(i).expect("a marked frame has its entry");
            return match m.side {
                Some((start, len)) => &mut self.side[start..start + len],
                None => &mut self.data[i * SLOT..i * SLOT + usize::from(len & !MARKED)],
            };
        }
        &mut self.data[i * SLOT..i * SLOT + len as usize]
    }

    /// Total bytes of all frames.
    pub fn bytes(&self) -> u64 {
        (0..self.len()).map(|i| self.frame_len(i) as u64).sum()
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
    /// Most frames held: the capacity it was made with, which every batch
    /// swapped in by [`take_into`](Self::take_into) has too.
    cap: usize,
}

impl Backlog {
    /// A backlog of at most `cap` frames.
    pub fn new(cap: usize) -> Self {
        Backlog {
            inner: Mutex::new(FrameBatch::new(cap)),
            len: AtomicUsize::new(0),
            cap,
        }
    }

    /// Append frames `which` of `src`, with their offloads; returns
    /// (accepted, dropped because full). A GSO frame that finds the side
    /// store full is dropped, and the frames after it still tried.
    pub fn push(&self, src: &FrameBatch, which: &[u16]) -> (u64, u64) {
        let mut q = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut ok = 0;
        for &i in which {
            if q.is_full() {
                break;
            }
            if q.push_from(src, usize::from(i)) {
                ok += 1;
            }
        }
        self.len.store(q.len(), Ordering::Release);
        (ok, which.len() as u64 - ok)
    }

    /// Swap the backlog's frames into `out` (which must be empty and of the
    /// same capacity); returns the number of frames taken.
    pub fn take_into(&self, out: &mut FrameBatch) -> usize {
        debug_assert!(out.is_empty());
        debug_assert_eq!(
            out.capacity(),
            self.cap,
            "a batch of another size swapped in"
        );
        if self.len.load(Ordering::Acquire) == 0 {
            return 0;
        }
        let mut q = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::swap(&mut *q, out);
        self.len.store(0, Ordering::Release);
        out.len()
    }

    /// Most frames held (no lock: the uplink's workers ask on every pass).
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Frames held now (read without the lock: a moment's value).
    pub fn held(&self) -> usize {
        self.len.load(Ordering::Acquire)
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
        assert!(!b.push(&vec![0; crate::net::MAX_GSO_FRAME + 1]));
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

    /// A frame kept with a partial checksum to complete (where does not
    /// matter here), cut into `cut_frames`.
    fn kept(cut_frames: u32) -> Offloaded {
        Offloaded {
            offload: Offload::Checksum(vadapt_wire::vnet_hdr::ChecksumAt {
                start: 34,
                offset: 6,
            }),
            hdr: VnetHdr::default(),
            cut_frames,
            cut_bytes: 0,
        }
    }

    #[test]
    fn marked_frames_keep_their_offload_and_plain_ones_carry_nothing() {
        let mut b = FrameBatch::new(4);
        assert!(b.push(&[1; 60]));
        b.next_slot().unwrap()[..70].fill(2);
        b.commit_offloaded(70, kept(1));
        let big = vec![3u8; 40_000];
        b.next_large(big.len()).unwrap().copy_from_slice(&big);
        b.commit_large(kept(28));
        assert!(b.has_offloads());
        assert_eq!((b.get(0), b.offloaded(0)), (&[1u8; 60][..], None));
        assert_eq!((b.get(1), b.offloaded(1)), (&[2u8; 70][..], Some(kept(1))));
        assert_eq!((b.get(2), b.offloaded(2)), (&big[..], Some(kept(28))));
        assert_eq!(b.frame_len(2), 40_000);
        assert_eq!(b.bytes(), 60 + 70 + 40_000);
        assert!(
            b.next_large(30_000).is_none(),
            "the side store holds 64 KiB here"
        );
        b.clear();
        assert!(!b.has_offloads());
        assert!(
            b.next_large(60_000).is_some(),
            "cleared, the side store is free"
        );
    }

    #[test]
    fn a_backlog_carries_offloads_and_drops_what_its_side_store_cannot_hold() {
        let mut src = FrameBatch::new(64); // side store: 128 KiB
        for i in 0..3u8 {
            src.next_large(30_000).unwrap().fill(i);
            src.commit_large(kept(21));
        }
        src.push(&[9; 60]);
        let bl = Backlog::new(4); // side store: 64 KiB, two of the three
        assert_eq!(bl.push(&src, &[0, 1, 2, 3]), (3, 1));
        let mut out = FrameBatch::new(4);
        bl.take_into(&mut out);
        assert_eq!(out.len(), 3);
        assert_eq!(out.get(1), &[1u8; 30_000][..]);
        assert_eq!(out.offloaded(1), Some(kept(21)));
        assert_eq!((out.get(2), out.offloaded(2)), (&[9u8; 60][..], None));
    }

    #[test]
    fn a_jumbo_frame_goes_to_the_side_store_and_stays_plain() {
        let jumbo: Vec<u8> = (0..9018).map(|i| (i % 251) as u8).collect();
        let mut b = FrameBatch::new(4);
        assert!(b.push(&[1; 60]));
        assert!(b.push(&jumbo));
        assert!(b.push(&[2; 1518]));
        assert_eq!(b.get(1), &jumbo[..]);
        assert_eq!(b.frame_len(1), 9018);
        assert_eq!(b.offloaded(1), None, "a jumbo frame is plain to the egress");
        assert!(!b.has_offloads());
        assert_eq!(b.bytes(), 60 + 9018 + 1518);
        b.get_mut(1)[0] = 0xee;
        assert_eq!(b.get(1)[0], 0xee);
        // A backlog carries it, and an offloaded frame beside it stays marked.
        b.next_slot().unwrap()[..70].fill(3);
        b.commit_offloaded(70, kept(1));
        let bl = Backlog::new(8);
        assert_eq!(bl.push(&b, &[0, 1, 2, 3]), (4, 0));
        let mut out = FrameBatch::new(8);
        bl.take_into(&mut out);
        assert_eq!(out.get(1).len(), 9018);
        assert_eq!(out.get(1)[1..], jumbo[1..]);
        assert_eq!(out.offloaded(1), None);
        assert!(out.has_offloads() && out.offloaded(3).is_some());
        out.clear();
        assert!(!out.has_offloads());
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
