//! What one service pass over a ring did — frames moved, calls sent, and
//! what it dropped, by cause — and how that is counted into the port's
//! [`QueueStats`]. The ring service ([`super::tx`], [`super::rx`]) returns a
//! [`RingPass`]; the worker counts it and does the logging.

use crate::metrics::{Dir, DropReason, QueueStats};
use crate::offload::OffloadRefused;
use std::sync::atomic::Ordering;
use vadapt_virtq::device::ChainErrorKind;

/// The outcome of one pass over one ring.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RingPass {
    /// Frames moved: handed to the switch (transmit) or written into guest
    /// buffers (receive).
    pub packets: u64,
    /// Their length, bytes, without the virtio-net header.
    pub bytes: u64,
    /// The pass stopped at its budget with more work pending.
    pub more_work: bool,
    /// Transmit only: entries available at the start of the pass, ‰ of the
    /// ring size (1000 when the ring is corrupt).
    pub fill_permille: u16,
    /// Calls (interrupts) sent to the guest.
    pub calls: u64,
    /// The guest ran `avail.idx` ahead: the pass marked the ring broken.
    pub broke_ring: bool,
    /// Receive only: GSO frames cut into MSS frames in software, because
    /// the guest does not take them (counted once, not per segment).
    pub gso_frames: u64,
    /// Receive only: partial checksums completed in software.
    pub csum_completed: u64,
    /// Receive only: GSO frames written whole into the guest's buffers.
    pub gso_whole: u64,
    /// What was dropped.
    pub drops: Drops,
}

impl RingPass {
    /// Nothing moved, called or dropped: a pass with nothing to count or
    /// log (most passes of a polling worker).
    pub fn is_quiet(&self) -> bool {
        self.packets == 0
            && self.calls == 0
            && !self.broke_ring
            && self.gso_frames == 0
            && self.csum_completed == 0
            && self.gso_whole == 0
            && self.drops.is_empty()
    }

    /// Adds the pass to `stats`: calls, packets and bytes in direction
    /// `dir`, drops by reason.
    pub fn count_into(&self, stats: &QueueStats, dir: Dir) {
        stats.add(dir, self.packets, self.bytes);
        self.count_events_into(stats);
    }

    /// Adds all but the packets and bytes to `stats` (a worker tallies
    /// those itself: [`crate::metrics::PassTally`]).
    pub fn count_events_into(&self, stats: &QueueStats) {
        if self.calls > 0 {
            stats.calls.fetch_add(self.calls, Ordering::Relaxed);
        }
        if self.gso_frames > 0 {
            stats
                .gso_frames
                .fetch_add(self.gso_frames, Ordering::Relaxed);
        }
        if self.csum_completed > 0 {
            stats
                .csum_completed
                .fetch_add(self.csum_completed, Ordering::Relaxed);
        }
        if self.gso_whole > 0 {
            stats.gso_whole.fetch_add(self.gso_whole, Ordering::Relaxed);
        }
        self.drops.count_into(stats);
    }
}

/// Frames and descriptor chains one pass dropped, by cause.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drops {
    /// Transmit chains shorter than the virtio-net header plus an Ethernet
    /// header ([`crate::net::MIN_FRAME`]).
    pub undersize: u64,
    /// Transmit GSO frames longer than [`crate::net::MAX_GSO_FRAME`].
    pub oversize: u64,
    /// Frames that are not GSO frames longer than the port's MTU allows
    /// ([`crate::net::max_frame`]): sent by the guest, or to be delivered
    /// to it.
    pub over_mtu: u64,
    /// The length of the first of them, bytes (for the log line).
    pub first_over_mtu: Option<usize>,
    /// Chains with descriptors the wrong way round: device-writable ones on
    /// transmit, device-readable ones on receive.
    pub wrong_direction: u64,
    /// Received frames that no (set of) guest buffers could hold.
    pub no_rx_buffer: u64,
    /// Received frames with no running receive ring to go to.
    pub port_down: u64,
    /// Chains the ring rejected, in the order met (one drop each).
    pub chain_errors: Vec<ChainErrorKind>,
    /// Frames whose virtio-net header was refused (transmit), or that could
    /// not be cut as their checked header said (receive: a bug).
    pub bad_vnet_hdr: u64,
    /// Why the first of them was refused (for the log line).
    pub first_bad_vnet_hdr: Option<OffloadRefused>,
    /// Transmit frames over the port's ingress policer's rates.
    pub policed: u64,
}

impl Drops {
    /// Nothing dropped.
    pub fn is_empty(&self) -> bool {
        self.undersize == 0
            && self.oversize == 0
            && self.over_mtu == 0
            && self.wrong_direction == 0
            && self.no_rx_buffer == 0
            && self.port_down == 0
            && self.chain_errors.is_empty()
            && self.bad_vnet_hdr == 0
            && self.policed == 0
    }

    /// Adds every drop to `stats` under its [`DropReason`].
    pub fn count_into(&self, stats: &QueueStats) {
        for (reason, n) in [
            (DropReason::Oversize, self.oversize),
            (DropReason::OverMtu, self.over_mtu),
            (DropReason::Undersize, self.undersize),
            (DropReason::WrongDirection, self.wrong_direction),
            (DropReason::NoRxBuffer, self.no_rx_buffer),
            (DropReason::PortDown, self.port_down),
            (DropReason::BadVnetHdr, self.bad_vnet_hdr),
            (DropReason::Policed, self.policed),
        ] {
            if n > 0 {
                stats.drop(reason, n);
            }
        }
        for &kind in &self.chain_errors {
            stats.drop(chain_error_reason(kind), 1);
        }
    }
}

/// The drop counter a rejected chain counts in.
pub fn chain_error_reason(kind: ChainErrorKind) -> DropReason {
    match kind {
        ChainErrorKind::AvailIndexAhead => DropReason::RingCorrupt,
        ChainErrorKind::HeadOutOfRange | ChainErrorKind::DescIndexOutOfRange => {
            DropReason::BadIndex
        }
        ChainErrorKind::AddressOutOfRange | ChainErrorKind::LengthOverflow => {
            DropReason::BadAddress
        }
        ChainErrorKind::ChainTooLong => DropReason::ChainLoop,
        ChainErrorKind::ReadableAfterWritable => DropReason::WrongDirection,
        ChainErrorKind::IndirectNotNegotiated
        | ChainErrorKind::IndirectWithNext
        | ChainErrorKind::IndirectTableEmpty
        | ChainErrorKind::IndirectTableMisaligned
        | ChainErrorKind::IndirectTableTooLarge
        | ChainErrorKind::IndirectTableOutOfRange
        | ChainErrorKind::NestedIndirect => DropReason::BadIndirect,
    }
}

#[cfg(test)]
pub(crate) mod test_utils {
    use crate::metrics::{DropReason, QueueStats};
    use std::sync::atomic::Ordering;

    /// Drops counted in `stats` for `reason`.
    pub(crate) fn dropped(stats: &QueueStats, reason: DropReason) -> u64 {
        let i = DropReason::ALL.iter().position(|r| *r == reason).unwrap();
        stats.drops[i].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::test_utils::dropped;
    use super::*;

    #[test]
    fn a_pass_is_counted_by_direction_and_reason() {
        let pass = RingPass {
            packets: 3,
            bytes: 180,
            calls: 2,
            gso_frames: 7,
            csum_completed: 8,
            drops: Drops {
                undersize: 1,
                oversize: 2,
                over_mtu: 9,
                first_over_mtu: Some(9019),
                wrong_direction: 3,
                no_rx_buffer: 4,
                port_down: 5,
                chain_errors: vec![
                    ChainErrorKind::AddressOutOfRange,
                    ChainErrorKind::LengthOverflow,
                    ChainErrorKind::ReadableAfterWritable,
                ],
                bad_vnet_hdr: 6,
                first_bad_vnet_hdr: None,
                policed: 10,
            },
            ..RingPass::default()
        };
        let st = QueueStats::default();
        pass.count_into(&st, Dir::Tx);
        assert_eq!(st.packets[Dir::Tx as usize].load(Ordering::Relaxed), 3);
        assert_eq!(st.bytes[Dir::Tx as usize].load(Ordering::Relaxed), 180);
        assert_eq!(st.packets[Dir::Rx as usize].load(Ordering::Relaxed), 0);
        assert_eq!(st.calls.load(Ordering::Relaxed), 2);
        assert_eq!(st.gso_frames.load(Ordering::Relaxed), 7);
        assert_eq!(st.csum_completed.load(Ordering::Relaxed), 8);
        assert_eq!(dropped(&st, DropReason::Undersize), 1);
        assert_eq!(dropped(&st, DropReason::Oversize), 2);
        assert_eq!(dropped(&st, DropReason::OverMtu), 9);
        assert_eq!(dropped(&st, DropReason::WrongDirection), 3 + 1);
        assert_eq!(dropped(&st, DropReason::NoRxBuffer), 4);
        assert_eq!(dropped(&st, DropReason::PortDown), 5);
        assert_eq!(dropped(&st, DropReason::BadVnetHdr), 6);
        assert_eq!(dropped(&st, DropReason::Policed), 10);
        assert_eq!(dropped(&st, DropReason::BadAddress), 2);
    }

    #[test]
    fn a_pass_with_anything_to_count_is_not_quiet() {
        assert!(RingPass::default().is_quiet());
        // `fill_permille` and `more_work` are not counted: still quiet.
        let noted = RingPass {
            fill_permille: 500,
            more_work: true,
            ..RingPass::default()
        };
        assert!(noted.is_quiet());
        let drops = |f: fn(&mut Drops)| {
            let mut d = Drops::default();
            f(&mut d);
            RingPass {
                drops: d,
                ..RingPass::default()
            }
        };
        let loud = [
            RingPass {
                packets: 1,
                ..RingPass::default()
            },
            RingPass {
                calls: 1,
                ..RingPass::default()
            },
            RingPass {
                broke_ring: true,
                ..RingPass::default()
            },
            RingPass {
                gso_frames: 1,
                ..RingPass::default()
            },
            RingPass {
                csum_completed: 1,
                ..RingPass::default()
            },
            RingPass {
                gso_whole: 1,
                ..RingPass::default()
            },
            drops(|d| d.undersize = 1),
            drops(|d| d.oversize = 1),
            drops(|d| d.over_mtu = 1),
            drops(|d| d.wrong_direction = 1),
            drops(|d| d.no_rx_buffer = 1),
            drops(|d| d.port_down = 1),
            drops(|d| d.chain_errors.push(ChainErrorKind::ChainTooLong)),
            drops(|d| d.bad_vnet_hdr = 1),
            drops(|d| d.policed = 1),
        ];
        for (i, pass) in loud.iter().enumerate() {
            assert!(!pass.is_quiet(), "case {i}: {pass:?}");
            // What is not quiet leaves a trace in the counters.
            let st = QueueStats::default();
            pass.count_into(&st, Dir::Tx);
            let counted = st.calls.load(Ordering::Relaxed)
                + st.packets[Dir::Tx as usize].load(Ordering::Relaxed)
                + st.gso_frames.load(Ordering::Relaxed)
                + st.csum_completed.load(Ordering::Relaxed)
                + st.gso_whole.load(Ordering::Relaxed)
                + st.drops
                    .iter()
                    .map(|d| d.load(Ordering::Relaxed))
                    .sum::<u64>();
            assert!(counted > 0 || pass.broke_ring, "case {i} counted nothing");
        }
    }

    #[test]
    fn every_chain_error_has_a_reason_other_than_other() {
        for kind in ChainErrorKind::ALL {
            assert_ne!(chain_error_reason(kind), DropReason::Other, "{kind:?}");
        }
        assert_eq!(
            chain_error_reason(ChainErrorKind::AvailIndexAhead),
            DropReason::RingCorrupt
        );
        assert_eq!(
            chain_error_reason(ChainErrorKind::ChainTooLong),
            DropReason::ChainLoop
        );
        assert_eq!(
            chain_error_reason(ChainErrorKind::NestedIndirect),
            DropReason::BadIndirect
        );
    }
}
