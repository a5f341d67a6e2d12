//! What several benchmarks share, so that no benchmark imports another:
//! the arithmetic of their per-packet figures ([`pct`], [`per_mpkt`]), the
//! policies B2–B4 measure ([`POLICIES`]), the warm-up that switching a
//! policy in at run time needs ([`Timing`], used by B2's after-the-search
//! table and by B9), and the keys of a port configured as a tenant's
//! ([`tenant_keys`], B1's and B8's tenant legs).

use std::time::Duration;
use vadapt_policy::netap::NetapParams;
use vadapt_policy::{PolicyConfig, PolicyKind};

/// vadapt's policies as B2 (partial load), B3 (latency) and B4 (idle)
/// measure them, in round order: every policy but NetAP-ML.
pub const POLICIES: [PolicyKind; 5] = [
    PolicyKind::BusyPoll,
    PolicyKind::Netap,
    PolicyKind::Eekbp,
    PolicyKind::Growshrink,
    PolicyKind::Interrupt,
];

/// Issue 37: busy cycles per packet of a port configured as a tenant's at
/// most this many times the same port's without, in the same round.
pub const GOAL_TENANT_OVERHEAD: f64 = 1.05;

/// The VLAN of the tenants' ports ([`tenant_keys`]): what they send
/// reaches only ports of this VLAN.
pub const TENANT_VLAN: u16 = 10;

/// The `--vm` keys of a port configured as an operator would configure a
/// tenant's VM whose guest sends from `mac`, with nothing the benchmark's
/// traffic exceeds: port security (`mac=`, on by default with it), an
/// access port of [`TENANT_VLAN`], and ingress policing at 100 Mpps and
/// 1 Tbit/s with bursts of 0.1 s. (At 100 Gbit/s with OVS's default burst,
/// 8 Mbit, the synthetic guest, which writes no payload, exceeded it at
/// 1518 B: it offers up to ~170 Gbit/s between the worker's passes.) Each
/// key is one item, so that a setting that lands later is one more line
/// here and both tenant legs measure it.
pub fn tenant_keys(mac: &str) -> Vec<String> {
    vec![
        format!("mac={mac}"),
        format!("vlan={TENANT_VLAN}"),
        "ingress_policing_kpkts_rate=100000".into(),
        "ingress_policing_kpkts_burst=10000".into(),
        "ingress_policing_rate=1000000000".into(),
        "ingress_policing_burst=100000000".into(),
    ]
}

/// `100 * a / b`, NaN (not stored) when `b` is 0.
pub fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        f64::NAN
    } else {
        a as f64 * 100.0 / b as f64
    }
}

/// `n` per million `pkts`, NaN (not stored) for no packets.
pub fn per_mpkt(n: u64, pkts: u64) -> f64 {
    if pkts == 0 {
        f64::NAN
    } else {
        n as f64 * 1e6 / pkts as f64
    }
}

/// How long each step takes when a policy is switched in at run time
/// (`set-policy`) and then measured: NetAP is given its search, the others
/// a short warm-up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// NetAP's round, ms (the paper's 1000; shorter in quick runs, so the
    /// search fits).
    pub netap_round_ms: u64,
    /// Time after switching to NetAP before measuring: its search.
    pub netap_warmup: Duration,
    /// Time after switching to another policy before measuring.
    pub warmup: Duration,
    /// Measurement window.
    pub window: Duration,
}

impl Timing {
    /// Full or quick.
    pub fn new(quick: bool) -> Timing {
        let netap_round_ms: u64 = if quick { 100 } else { 1000 };
        Timing {
            netap_round_ms,
            // 11 rounds of search, one for the kick-driven check, two more
            // to spare.
            netap_warmup: Duration::from_millis(14 * netap_round_ms),
            warmup: Duration::from_millis(if quick { 250 } else { 1000 }),
            window: Duration::from_millis(if quick { 500 } else { 2500 }),
        }
    }

    /// One round over `policies`: each one's warm-up and window.
    pub fn round(&self, policies: &[PolicyKind]) -> Duration {
        policies.iter().map(|p| self.settle(*p) + self.window).sum()
    }

    /// Warm-up of `p`.
    pub fn settle(&self, p: PolicyKind) -> Duration {
        if p == PolicyKind::Netap {
            self.netap_warmup
        } else {
            self.warmup
        }
    }

    /// The policy and its parameters as switched in: NetAP with this
    /// timing's round, the others with their defaults.
    pub fn policy(&self, p: PolicyKind) -> PolicyConfig {
        match p {
            PolicyKind::Netap => PolicyConfig::Netap(NetapParams {
                round_ms: self.netap_round_ms,
                ..NetapParams::default()
            }),
            other => PolicyConfig::default_for(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(pct(1, 4), 25.0);
        assert!(pct(1, 0).is_nan());
        assert_eq!(per_mpkt(2, 1_000_000), 2.0);
        assert!(per_mpkt(2, 0).is_nan());
    }

    #[test]
    fn timing_fits_netaps_search() {
        for quick in [true, false] {
            let t = Timing::new(quick);
            // NetAP's search with the paper's constants: 11 rounds.
            // and the kick-driven check after it: one more.
            assert!(t.netap_warmup >= Duration::from_millis(12 * t.netap_round_ms));
            let PolicyConfig::Netap(p) = t.policy(PolicyKind::Netap) else {
                panic!("netap");
            };
            assert_eq!(p.round_ms, t.netap_round_ms);
            assert_eq!(
                t.policy(PolicyKind::Eekbp),
                PolicyConfig::default_for(PolicyKind::Eekbp)
            );
            assert_eq!(
                t.round(&[PolicyKind::Netap, PolicyKind::Interrupt]),
                t.netap_warmup + t.warmup + 2 * t.window
            );
        }
    }
}
