//! The `VIRTIO_F_EVENT_IDX` notification test both sides of a ring apply.

/// The spec's event-index test (virtio 1.2, 2.7.10 and 2.7.7; Linux
/// `vring_need_event`): `true` if `event_idx` lies in the half-open window
/// `[old, new)` of indices moved past since the last notification, in
/// 16-bit wrapping arithmetic.
#[inline]
pub fn vring_need_event(event_idx: u16, new_idx: u16, old: u16) -> bool {
    new_idx.wrapping_sub(event_idx).wrapping_sub(1) < new_idx.wrapping_sub(old)
}

#[cfg(test)]
mod tests {
    use super::vring_need_event;

    #[test]
    fn need_event_fires_when_event_is_crossed() {
        // Moved from 10 to 15: events 10..=14 were crossed.
        for ev in 10..15 {
            assert!(vring_need_event(ev, 15, 10), "event {ev}");
        }
        assert!(!vring_need_event(9, 15, 10));
        assert!(!vring_need_event(15, 15, 10), "not reached yet");
        assert!(!vring_need_event(200, 15, 10));
        // Nothing moved: never.
        assert!(!vring_need_event(10, 10, 10));
    }

    #[test]
    fn need_event_wraps_at_16_bits() {
        assert!(vring_need_event(65535, 2, 65534));
        assert!(vring_need_event(0, 2, 65534));
        assert!(vring_need_event(1, 2, 65534));
        assert!(!vring_need_event(2, 2, 65534));
        assert!(!vring_need_event(65533, 2, 65534));
    }

    #[test]
    fn need_event_matches_a_reference_model() {
        // Reference: walk the indices one by one.
        let reference = |ev: u16, new: u16, old: u16| {
            let mut i = old;
            while i != new {
                if i == ev {
                    return true;
                }
                i = i.wrapping_add(1);
            }
            false
        };
        let samples = [0u16, 1, 2, 100, 32767, 32768, 65530, 65534, 65535];
        for &ev in &samples {
            for &old in &samples {
                for d in [0u16, 1, 2, 5, 256] {
                    let new = old.wrapping_add(d);
                    assert_eq!(vring_need_event(ev, new, old), reference(ev, new, old));
                }
            }
        }
    }
}
