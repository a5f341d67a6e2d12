//! A split virtqueue at index level, with `VIRTIO_RING_F_EVENT_IDX` semantics.
//!
//! Indices are free-running `u64`s (no wrap): `avail` counts descriptor chains
//! the guest posted, `taken` the ones the host took (`last_avail_idx`), `used`
//! the ones the host returned. The guest may have at most `size` chains
//! outstanding (`avail - used`), which is what makes a slow host stall it.
//!
//! Notifications follow `vring_need_event(event, new, old)`: a side notifies
//! when moving its index from `old` to `new` passes the other side's event
//! index, i.e. `old <= event < new`. "Notifications off" is an event index
//! the guest will never pass again (`None` here).

/// One ring of a queue (guest-to-host direction).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ring {
    size: u64,
    avail: u64,
    taken: u64,
    used: u64,
    /// Host's `avail_event`: kick me when `avail` passes this.
    avail_event: Option<u64>,
    /// Guest's `used_event`: call me when `used` passes this.
    used_event: Option<u64>,
}

/// `vring_need_event` on unwrapped indices.
pub fn need_event(event: u64, new: u64, old: u64) -> bool {
    old <= event && event < new
}

impl Ring {
    /// An empty ring of `size` descriptors, all notifications off.
    pub fn new(size: u32) -> Ring {
        Ring {
            size: u64::from(size),
            avail: 0,
            taken: 0,
            used: 0,
            avail_event: None,
            used_event: None,
        }
    }

    /// Ring size, descriptors.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// Chains the guest can still post.
    pub fn free(&self) -> u64 {
        self.size - (self.avail - self.used)
    }
    /// Chains posted but not yet taken by the host: the host's pending work.
    pub fn pending(&self) -> u64 {
        self.avail - self.taken
    }
    /// Chains posted so far (`avail.idx`).
    pub fn avail(&self) -> u64 {
        self.avail
    }
    /// Host's current `avail_event`, if it wants kicks.
    pub fn avail_event(&self) -> Option<u64> {
        self.avail_event
    }
    /// Chains the guest must post (from now) before its next kick, if any.
    pub fn posts_until_kick(&self) -> Option<u64> {
        self.avail_event
            .filter(|&e| e >= self.avail)
            .map(|e| e + 1 - self.avail)
    }

    /// Guest posts `n` chains (`n <= free()`); returns true if it must kick.
    /// A kick disarms the event: the host re-arms it when it waits again.
    pub fn post(&mut self, n: u64) -> bool {
        debug_assert!(n <= self.free(), "posting {n} into {} free", self.free());
        let old = self.avail;
        self.avail += n;
        match self.avail_event {
            Some(e) if need_event(e, self.avail, old) => {
                self.avail_event = None;
                true
            }
            _ => false,
        }
    }

    /// Host: notifications on — kick at the next post. The caller must
    /// re-check `pending()` afterwards (a post may have raced in).
    pub fn enable_kick(&mut self) {
        self.avail_event = Some(self.avail);
    }

    /// Host: kick once `pending()` reaches `fill` (≥ 1) chains — the
    /// ring-full safety net of a sleeping poller. Off if already past.
    pub fn enable_kick_at_fill(&mut self, fill: u64) {
        let e = self.taken + fill.max(1) - 1;
        self.avail_event = if e >= self.avail { Some(e) } else { None };
    }

    /// Host: notifications off (leave `avail_event` behind).
    pub fn disable_kick(&mut self) {
        self.avail_event = None;
    }

    /// Host takes up to `max` pending chains; returns how many.
    pub fn take(&mut self, max: u64) -> u64 {
        let n = self.pending().min(max);
        self.taken += n;
        n
    }

    /// Host returns `n` taken chains (publishes used.idx once for the batch);
    /// returns true if the guest asked to be called.
    pub fn complete(&mut self, n: u64) -> bool {
        debug_assert!(self.used + n <= self.taken);
        let old = self.used;
        self.used += n;
        match self.used_event {
            Some(e) if need_event(e, self.used, old) => {
                self.used_event = None;
                true
            }
            _ => false,
        }
    }

    /// Guest, stopping its queue on a full ring: Linux's
    /// `virtqueue_enable_cb_delayed`, which asks for a call once 3/4 of the
    /// outstanding chains have been used.
    pub fn enable_call_delayed(&mut self) {
        let outstanding = self.avail - self.used;
        self.used_event = Some(self.used + outstanding * 3 / 4);
    }

    /// True while the guest waits for a call.
    pub fn wants_call(&self) -> bool {
        self.used_event.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_stalls_when_ring_is_full_until_host_returns_chains() {
        let mut r = Ring::new(8);
        assert!(!r.post(8));
        assert_eq!(r.free(), 0);
        assert_eq!(r.take(5), 5);
        // Taken but not yet used: still no room for the guest.
        assert_eq!(r.free(), 0);
        r.complete(5);
        assert_eq!(r.free(), 5);
        assert_eq!(r.pending(), 3);
    }

    #[test]
    fn kick_only_when_host_asked_and_only_once() {
        let mut r = Ring::new(256);
        // Notifications off: no kick however much is posted.
        assert!(!r.post(10));
        r.take(10);
        r.complete(10);
        // Host waits: the next post kicks, later ones do not.
        r.enable_kick();
        assert!(r.post(1));
        assert!(!r.post(1));
        assert!(!r.post(5));
        // Re-armed with work pending: no kick until a post passes the event,
        // which is why the host re-checks after enabling.
        r.enable_kick();
        assert_eq!(r.pending(), 7);
        assert!(r.post(1));
    }

    #[test]
    fn fill_threshold_kick_fires_at_the_threshold() {
        let mut r = Ring::new(256);
        r.enable_kick_at_fill(192);
        assert_eq!(r.posts_until_kick(), Some(192));
        assert!(!r.post(191));
        assert!(r.post(1));
        assert_eq!(r.pending(), 192);
    }

    #[test]
    fn delayed_callback_fires_after_three_quarters_used() {
        let mut r = Ring::new(8);
        r.post(8);
        r.enable_call_delayed();
        r.take(8);
        assert!(!r.complete(6)); // used = 6 = used_event: not passed yet
        assert!(r.complete(1));
        assert!(!r.wants_call());
    }
}
