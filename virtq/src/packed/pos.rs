//! A position in a packed ring together with its wrap counter.

/// A ring position and the wrap counter that goes with it (spec 2.8.1:
/// both counters start at 1 and flip each time the position passes the
/// end of the ring).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RingPos {
    /// Descriptor index, `< size`.
    pub idx: u16,
    /// Wrap counter.
    pub wrap: bool,
}

impl Default for RingPos {
    /// Position 0 with wrap counter 1, where both sides start.
    fn default() -> Self {
        RingPos { idx: 0, wrap: true }
    }
}

impl RingPos {
    /// From the 16-bit form vhost-user's `SET_VRING_BASE` and the event
    /// suppression `off_wrap` use: position in bits 0–14, wrap in bit 15.
    pub fn from_u16(v: u16) -> Self {
        RingPos {
            idx: v & 0x7fff,
            wrap: v & 0x8000 != 0,
        }
    }

    /// The 16-bit form (see [`from_u16`](Self::from_u16)).
    pub fn to_u16(self) -> u16 {
        (self.idx & 0x7fff) | (u16::from(self.wrap) << 15)
    }

    /// The position `n` descriptors further in a ring of `size`, flipping
    /// the wrap counter once per end passed. `size` must be non-zero.
    #[inline]
    pub fn advance(self, n: u32, size: u16) -> Self {
        let size = u32::from(size.max(1));
        let t = u32::from(self.idx) + n;
        let laps = t / size;
        RingPos {
            idx: (t % size) as u16,
            wrap: self.wrap ^ (laps & 1 == 1),
        }
    }

    /// The next position: [`advance`](Self::advance) by one without its
    /// division, for the loops that step one descriptor at a time (the
    /// walk, the scan of what is available). `self.idx` must be below
    /// `size`.
    #[inline]
    pub(crate) fn next(self, size: u16) -> Self {
        let idx = self.idx + 1;
        if idx >= size {
            RingPos {
                idx: 0,
                wrap: !self.wrap,
            }
        } else {
            RingPos {
                idx,
                wrap: self.wrap,
            }
        }
    }

    /// The position `n` descriptors back (the inverse of `advance`).
    pub fn back(self, n: u32, size: u16) -> Self {
        let s = u32::from(size.max(1));
        let n = n % (2 * s);
        // Going back n is going forward 2*size - n: two laps flip twice.
        self.advance(2 * s - n, size)
    }

    /// This position on a line that counts the current lap from 0 and the
    /// previous one from `-size` (wrapping at 16 bits), when `current` is
    /// the wrap counter of the current lap: the coordinates in which
    /// [`vring_need_event`](crate::vring_need_event) compares positions.
    #[inline]
    pub(crate) fn on_line(self, current: bool, size: u16) -> u16 {
        if self.wrap == current {
            self.idx
        } else {
            self.idx.wrapping_sub(size)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_flips_the_wrap_counter_per_lap() {
        let p = RingPos::default();
        assert_eq!(p.advance(4, 5), RingPos { idx: 4, wrap: true });
        assert_eq!(
            p.advance(5, 5),
            RingPos {
                idx: 0,
                wrap: false
            }
        );
        assert_eq!(p.advance(12, 5), RingPos { idx: 2, wrap: true });
        assert_eq!(p.advance(7, 5).back(7, 5), p);
        assert_eq!(
            p.back(1, 5),
            RingPos {
                idx: 4,
                wrap: false
            }
        );
        let top = RingPos {
            idx: 32767,
            wrap: false,
        };
        assert_eq!(top.advance(1, 32768), RingPos { idx: 0, wrap: true });
        assert_eq!(RingPos::from_u16(top.to_u16()), top);
        assert_eq!(RingPos::from_u16(0x8003), RingPos { idx: 3, wrap: true });
    }

    #[test]
    fn next_is_advance_by_one() {
        for size in [1u16, 2, 3, 5, 256, 300, 32768] {
            for wrap in [false, true] {
                for idx in (0..size).filter(|i| *i < 4 || size - i < 4) {
                    let p = RingPos { idx, wrap };
                    assert_eq!(p.next(size), p.advance(1, size), "{p:?} of {size}");
                }
            }
        }
    }
}
