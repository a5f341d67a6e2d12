//! OVS's ingress policing of one port: a bit-rate bucket and a frame-rate
//! bucket, of which a frame must conform to both.
//!
//! As OVS charges them: a frame costs its length less the 14-byte Ethernet
//! header in bits (`netdev_dpdk_srtcm_policer_pkt_handle`: "bytes of IP
//! packets ..., not link specific (e.g. Ethernet) headers", in the words of
//! `vswitch.conf.db(5)` on OVS-DPDK's policers) and one frame;
//! a GSO frame is charged whole, as the one frame the guest handed over, as
//! OVS charges the one buffer that carries it. Both buckets are checked
//! before either is charged: a frame refused by one costs the other
//! nothing, since a dropped frame used nothing.

use super::token_bucket::TokenBucket;
use crate::config::PortLimits;
use vadapt_policy::Instant;

/// Bytes of a frame that the bit rate does not count: the Ethernet header.
pub const ETHERNET_HEADER: usize = 14;

/// See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IngressPolicer {
    /// Bits a second (`ingress_policing_rate`), if limited.
    bits: Option<TokenBucket>,
    /// Frames a second (`ingress_policing_kpkts_rate`), if limited.
    frames: Option<TokenBucket>,
}

impl IngressPolicer {
    /// The policer `limits` ask for, its buckets full as of `now`; `None`
    /// when they limit neither rate.
    pub fn new(limits: &PortLimits, now: Instant) -> Option<Self> {
        let bucket = |r: crate::config::RateLimit| TokenBucket::new(r.per_second, r.burst, now);
        let p = IngressPolicer {
            bits: limits.bits().map(bucket),
            frames: limits.packets().map(bucket),
        };
        (p.bits.is_some() || p.frames.is_some()).then_some(p)
    }

    /// Counts the tokens earned up to `now` (once a pass).
    pub fn refill(&mut self, now: Instant) {
        for b in [&mut self.bits, &mut self.frames].into_iter().flatten() {
            b.refill(now);
        }
    }

    /// Whether a frame of `len` bytes (without the virtio-net header)
    /// conforms to both rates; if so, it is charged to both.
    pub fn admit(&mut self, len: usize) -> bool {
        let bits = (len.saturating_sub(ETHERNET_HEADER) as u64).saturating_mul(8);
        if self.bits.as_ref().is_some_and(|b| !b.conforms(bits))
            || self.frames.as_ref().is_some_and(|b| !b.conforms(1))
        {
            return false;
        }
        if let Some(b) = &mut self.bits {
            b.take(bits);
        }
        if let Some(b) = &mut self.frames {
            b.take(1);
        }
        true
    }

    /// As [`admit`](Self::admit), and a frame that does not conform is
    /// asked about once more after a refill to `now()`, which is read only
    /// then. A worker refills once a pass; a pass that takes more than a
    /// burst's worth of frames (a guest that refills its ring as fast as
    /// the worker empties it: 665 frames of 1518 bytes fill OVS's default
    /// 8000 kb) would otherwise drop frames the rate allows.
    pub fn admit_or_refill(&mut self, len: usize, now: impl FnOnce() -> Instant) -> bool {
        self.admit(len) || {
            self.refill(now());
            self.admit(len)
        }
    }

    /// The bit-rate bucket, if any.
    pub fn bits(&self) -> Option<&TokenBucket> {
        self.bits.as_ref()
    }

    /// The frame-rate bucket, if any.
    pub fn frames(&self) -> Option<&TokenBucket> {
        self.frames.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn a_frame_costs_its_bits_without_the_ethernet_header_and_one_frame() {
        // 8 kbps with a burst of 8 kb: 1000 bytes of payload a second.
        let limits = PortLimits {
            ingress_policing_rate: 8,
            ingress_policing_burst: 8,
            ..PortLimits::NONE
        };
        let mut p = IngressPolicer::new(&limits, Instant(0)).unwrap();
        assert!(p.frames().is_none());
        assert!(p.admit(514), "500 bytes counted");
        assert!(p.admit(514));
        assert!(!p.admit(60), "the burst is spent");
        assert_eq!(p.bits().unwrap().tokens(), 0);
        p.refill(Instant(SEC / 2));
        assert!(p.admit(514));
        assert!(!p.admit(15));
        assert!(p.admit(14), "a bare header costs nothing");
    }

    #[test]
    fn a_frame_refused_by_one_rate_costs_the_other_nothing() {
        let limits = PortLimits {
            ingress_policing_rate: 1_000,
            ingress_policing_burst: 100, // 100 000 bits
            ingress_policing_kpkts_rate: 1,
            ingress_policing_kpkts_burst: 1, // 1000 frames
            ..PortLimits::NONE
        };
        let mut p = IngressPolicer::new(&limits, Instant(0)).unwrap();
        // 1000 frames of 14 bytes (no bits) spend the frame burst only.
        assert_eq!((0..1001).filter(|_| p.admit(14)).count(), 1000);
        assert_eq!(p.bits().unwrap().tokens(), 100_000, "no bits charged");
        p.refill(Instant(SEC / 1000)); // one frame's worth, one ms of bits
                                       // Too many bits: refused, and the frame token stays.
        assert!(!p.admit(14 + 20_000));
        assert_eq!(p.frames().unwrap().tokens(), 1);
        assert!(p.admit(64));
    }

    #[test]
    fn a_frame_short_of_tokens_is_asked_about_again_at_a_later_now() {
        // 8 kbps, a burst of one 1000-byte frame's 7888 bits... and no more.
        let limits = PortLimits {
            ingress_policing_rate: 8,
            ingress_policing_burst: 8,
            ..PortLimits::NONE
        };
        let mut p = IngressPolicer::new(&limits, Instant(0)).unwrap();
        assert!(p.admit_or_refill(1000, || panic!("clock read while tokens are there")));
        // Short at t = 0; a second later the bucket has earned another frame.
        assert!(!p.admit_or_refill(1000, || Instant(0)));
        assert!(p.admit_or_refill(1000, || Instant(SEC)));
        assert!(!p.admit_or_refill(1000, || Instant(SEC)));
    }

    #[test]
    fn no_rate_no_policer() {
        assert!(IngressPolicer::new(&PortLimits::NONE, Instant(0)).is_none());
        let storm_only = PortLimits {
            storm_control_pps: 10,
            ..PortLimits::NONE
        };
        assert!(IngressPolicer::new(&storm_only, Instant(0)).is_none());
    }
}
