//! Round-robin time slices of the vCPU cores among stream sender groups
//! (`host.vcpu_sched = "slices"`).
//!
//! Processor sharing (the default) runs every runnable sender at
//! `cores / runnable` of a core at once. CFS does not run CPU-bound threads
//! that way: it gives one a core for a slice of milliseconds while the
//! others wait. The difference matters when the guests' writes race their
//! workers: six senders on one core each writing at a sixth of the speed
//! post one message per wake-up of their worker, where a sender that has
//! the core for a slice posts many.
//!
//! Here the groups (the senders of one queue) take the cores in turn: a
//! slice starts at some group and serves groups in queue order until the
//! cores are given out; when it ends, the next slice starts after the last
//! group served. A group that blocks (ring full, waiting for the TX call)
//! hands its share to the next group at once, and takes its turn again when
//! it is runnable.

/// The rotation's state.
#[derive(Debug, Default)]
pub(crate) struct Slices {
    /// First group of the current slice.
    start: usize,
    /// First group of the next slice: the one after the last served now.
    next: usize,
    /// Bumped each time a slice end is scheduled; the event carries it.
    gen: u64,
    /// A slice end is scheduled.
    armed: bool,
}

impl Slices {
    /// Gives `cores` to the groups in turn: `runnable[i]` threads of group
    /// `i` want to run (0: blocked, or not a sender), `on[i]` gets the
    /// threads that do. Returns whether some wait (the cores are
    /// oversubscribed and slices must rotate).
    pub fn assign(&mut self, runnable: &[f64], cores: f64, on: &mut [f64]) -> bool {
        let total: f64 = runnable.iter().sum();
        if total <= cores + 1e-9 {
            on.copy_from_slice(runnable);
            self.next = self.start;
            return false;
        }
        on.fill(0.0);
        let n = runnable.len();
        let mut left = cores;
        let mut i = self.start % n;
        for _ in 0..n {
            if left <= 1e-9 {
                break;
            }
            if runnable[i] > 0.0 {
                on[i] = runnable[i].min(left);
                left -= on[i];
            }
            i = (i + 1) % n;
        }
        self.next = i;
        true
    }

    /// Schedules the current slice's end unless one is: the generation the
    /// event must carry, or `None` when one is already scheduled.
    pub fn arm(&mut self) -> Option<u64> {
        if self.armed {
            return None;
        }
        self.armed = true;
        self.gen += 1;
        Some(self.gen)
    }

    /// A slice end of generation `gen` fires: the next slice starts after
    /// the last group served, if the event is the current one.
    pub fn fire(&mut self, gen: u64) {
        if self.armed && gen == self.gen {
            self.armed = false;
            self.start = self.next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undersubscribed_everyone_runs() {
        let mut s = Slices::default();
        let mut on = [0.0; 3];
        assert!(!s.assign(&[1.0, 0.0, 0.5], 2.0, &mut on));
        assert_eq!(on, [1.0, 0.0, 0.5]);
    }

    #[test]
    fn oversubscribed_groups_take_turns_and_blocked_ones_are_skipped() {
        let mut s = Slices::default();
        let mut on = [0.0; 4];
        // One core, four single-thread groups: 0 runs.
        assert!(s.assign(&[1.0; 4], 1.0, &mut on));
        assert_eq!(on, [1.0, 0.0, 0.0, 0.0]);
        let g = s.arm().unwrap();
        assert_eq!(s.arm(), None, "one slice end at a time");
        // Group 0 blocks mid-slice: 1 runs at once.
        s.assign(&[0.0, 1.0, 1.0, 1.0], 1.0, &mut on);
        assert_eq!(on, [0.0, 1.0, 0.0, 0.0]);
        // The slice ends: 2 goes next.
        s.fire(g);
        s.assign(&[1.0; 4], 1.0, &mut on);
        assert_eq!(on, [0.0, 0.0, 1.0, 0.0]);
        // A stale slice end changes nothing.
        s.fire(g);
        s.assign(&[1.0; 4], 1.0, &mut on);
        assert_eq!(on, [0.0, 0.0, 1.0, 0.0]);
        // Wrapping around, and a group of three threads on two cores.
        let g = s.arm().unwrap();
        s.fire(g);
        s.assign(&[3.0, 1.0, 1.0, 1.0], 2.0, &mut on);
        assert_eq!(on, [1.0, 0.0, 0.0, 1.0]);
        let g = s.arm().unwrap();
        s.fire(g);
        s.assign(&[3.0, 1.0, 1.0, 1.0], 2.0, &mut on);
        assert_eq!(on, [0.0, 1.0, 1.0, 0.0]);
    }
}
