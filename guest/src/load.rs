//! Offered load: parsing of `--rate` and the pacing arithmetic of rate mode.
//!
//! The pacer is pure: it is handed the time and answers how many packets are due, like the
//! policies of this project (it never reads a clock, so its tests need no sleeping).

use serde::Serialize;

/// How much a guest thread offers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Load {
    /// Send whenever the TX ring has room (like netperf TCP_STREAM), or in request/response
    /// mode send the next request as soon as the reply is back.
    ClosedLoop,
    /// A fixed rate for the whole guest, shared evenly by its threads.
    Rate {
        /// Packets per second offered by the whole guest.
        pps: f64,
    },
}

/// What `--rate` says, before the message size turns bits into packets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateSpec {
    /// `closed`: closed loop.
    Closed,
    /// A packet rate (packets per second).
    Pps(f64),
    /// A bit rate (bits per second of Ethernet frames: 14-byte header + payload, no preamble,
    /// inter-frame gap nor FCS).
    Bps(f64),
}

/// Why a `--rate` value was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RateError {
    /// The text is not a number with an optional k/M/G prefix and unit.
    #[error("`{0}` is not a rate: use e.g. 100k, 1Mpps, 2Gbit or closed")]
    Syntax(String),
    /// The number is zero, negative or not finite.
    #[error("rate must be positive and finite, got `{0}`")]
    NotPositive(String),
}

impl RateSpec {
    /// Parses `closed`, `100k`, `250000`, `1Mpps`, `1.5M`, `2Gbit`, `2Gbps`, `500Mbit/s`.
    /// A bare number or the `pps` unit is packets per second; `bit`, `bps`, `bit/s` or `b` is
    /// bits per second. Prefixes k/K (10^3), M (10^6), G (10^9).
    pub fn parse(text: &str) -> Result<RateSpec, RateError> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("closed") {
            return Ok(RateSpec::Closed);
        }
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == '-' || c == '+'))
            .unwrap_or(t.len());
        // `e` belongs to a number only when followed by a digit or sign (1e6), never as a unit.
        let (num, rest) = t.split_at(split);
        let value: f64 = num
            .parse()
            .map_err(|_| RateError::Syntax(text.to_string()))?;
        let (mult, unit) = match rest.chars().next() {
            Some('k' | 'K') => (1e3, &rest[1..]),
            Some('M') => (1e6, &rest[1..]),
            Some('G') => (1e9, &rest[1..]),
            _ => (1.0, rest),
        };
        let bits = match unit.to_ascii_lowercase().as_str() {
            "" | "pps" | "p/s" => false,
            "bit" | "bits" | "bps" | "bit/s" | "b" => true,
            _ => return Err(RateError::Syntax(text.to_string())),
        };
        let v = value * mult;
        if !(v.is_finite() && v > 0.0) {
            return Err(RateError::NotPositive(text.to_string()));
        }
        Ok(if bits {
            RateSpec::Bps(v)
        } else {
            RateSpec::Pps(v)
        })
    }

    /// The load this rate means for messages of `size` payload bytes (frame = 14 + `size`).
    pub fn to_load(self, size: u32) -> Load {
        match self {
            RateSpec::Closed => Load::ClosedLoop,
            RateSpec::Pps(pps) => Load::Rate { pps },
            RateSpec::Bps(bps) => Load::Rate {
                pps: bps / (8.0 * frame_bits_base(size)),
            },
        }
    }
}

/// Bytes of one Ethernet frame for a message of `size` payload bytes.
fn frame_bits_base(size: u32) -> f64 {
    (vadapt_wire::ethernet::ETH_HDR_LEN as f64) + f64::from(size)
}

/// How a paced thread spends the time until its next packets are due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pacing {
    /// Every packet at its own time: the thread sleeps through long gaps and busy-waits
    /// through short ones (under 100 µs), as Linux `pktgen` does with its `delay`. From about
    /// 10k packets/s on, the thread never sleeps: its vCPU is busy all the time, and on a
    /// host core shared with another guest the scheduler lets it run for whole ticks
    /// (4 ms at 250 Hz) while the other guest waits.
    #[default]
    Exact,
    /// Packets due less than 100 µs apart go out in bursts: the thread sleeps until a
    /// burst's worth is due (enough to span 100 µs, at most 64), then sends them back to
    /// back, like the Linux `fq` qdisc releasing what falls within its timer slack at once,
    /// or netperf's `-b`/`-w` bursts. Between bursts the vCPU idles, as a guest's does
    /// between timer interrupts. The average rate is the same; a late wake-up is made up in
    /// the next burst (up to the pacer's backlog).
    Burst,
}

/// Paces one thread at a fixed packet rate.
///
/// Packet `n` (from 0) is due at `start + n / pps`. When the sender falls behind (ring full,
/// descheduled), at most `max_backlog` overdue packets are kept: the rest are forgotten rather
/// than sent in a burst, as a rate-limited netperf does not catch up either; [`Pacer::skipped`]
/// counts them.
#[derive(Debug, Clone)]
pub struct Pacer {
    /// Interval between packets (ns, fractional so that rates above 1 Gpps or with
    /// non-integer intervals do not drift).
    interval_ns: f64,
    /// Time packet 0 was due (ns on the caller's clock).
    start_ns: u64,
    /// Packets released so far (sent or skipped).
    released: u64,
    /// Most overdue packets handed out at once.
    max_backlog: u64,
    /// Packets forgotten because the sender fell behind by more than `max_backlog`.
    skipped: u64,
}

impl Pacer {
    /// A pacer for `pps` packets per second starting at `start_ns`.
    ///
    /// # Panics
    /// If `pps` is not positive and finite (the CLI refuses such rates first).
    pub fn new(pps: f64, start_ns: u64, max_backlog: u64) -> Pacer {
        assert!(pps.is_finite() && pps > 0.0, "pacer rate must be positive");
        Pacer {
            interval_ns: 1e9 / pps,
            start_ns,
            released: 0,
            max_backlog: max_backlog.max(1),
            skipped: 0,
        }
    }

    /// Packets due at `now_ns` and not handed out yet; the caller must send them (or call
    /// [`Pacer::unsend`] for those it could not).
    pub fn due(&mut self, now_ns: u64) -> u64 {
        if now_ns < self.start_ns {
            return 0;
        }
        let elapsed = (now_ns - self.start_ns) as f64;
        // Packets whose due time is <= now: floor(elapsed / interval) + 1.
        let total = (elapsed / self.interval_ns) as u64 + 1;
        let mut due = total.saturating_sub(self.released);
        if due > self.max_backlog {
            self.skipped += due - self.max_backlog;
            self.released += due - self.max_backlog;
            due = self.max_backlog;
        }
        self.released += due;
        due
    }

    /// Gives back `n` packets handed out by [`Pacer::due`] that were not sent.
    pub fn unsend(&mut self, n: u64) {
        self.released = self.released.saturating_sub(n);
    }

    /// When the next packet not yet handed out is due (ns on the caller's clock).
    pub fn next_due_ns(&self) -> u64 {
        self.burst_due_ns(1)
    }

    /// When `n` packets not yet handed out will be due (ns on the caller's clock): the due
    /// time of the `n`-th of them (`n` of 0 counts as 1).
    pub fn burst_due_ns(&self, n: u64) -> u64 {
        let last = self.released + n.max(1) - 1;
        // Rounded up, so that at this time `due` hands all `n` out.
        self.start_ns + (last as f64 * self.interval_ns).ceil() as u64
    }

    /// Packets due over `span_ns`, rounded up, between 1 and `max`: the burst that lets a
    /// [`Pacing::Burst`] sender sleep at least `span_ns` between bursts (unless `max` caps it).
    pub fn burst_len(&self, span_ns: u64, max: u64) -> u64 {
        ((span_ns as f64 / self.interval_ns).ceil() as u64).clamp(1, max.max(1))
    }

    /// Packets forgotten because the sender fell too far behind.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rates() {
        assert_eq!(RateSpec::parse("closed"), Ok(RateSpec::Closed));
        assert_eq!(RateSpec::parse("Closed"), Ok(RateSpec::Closed));
        assert_eq!(RateSpec::parse("100k"), Ok(RateSpec::Pps(100e3)));
        assert_eq!(RateSpec::parse("250000"), Ok(RateSpec::Pps(250e3)));
        assert_eq!(RateSpec::parse("1Mpps"), Ok(RateSpec::Pps(1e6)));
        assert_eq!(RateSpec::parse("1.5M"), Ok(RateSpec::Pps(1.5e6)));
        assert_eq!(RateSpec::parse("2Gbit"), Ok(RateSpec::Bps(2e9)));
        assert_eq!(RateSpec::parse("2Gbps"), Ok(RateSpec::Bps(2e9)));
        assert_eq!(RateSpec::parse("500Mbit/s"), Ok(RateSpec::Bps(500e6)));
        assert_eq!(RateSpec::parse("1e6"), Ok(RateSpec::Pps(1e6)));
    }

    #[test]
    fn refuses_bad_rates() {
        assert!(matches!(
            RateSpec::parse("0"),
            Err(RateError::NotPositive(_))
        ));
        assert!(matches!(
            RateSpec::parse("0Mpps"),
            Err(RateError::NotPositive(_))
        ));
        assert!(matches!(
            RateSpec::parse("-5k"),
            Err(RateError::NotPositive(_))
        ));
        assert!(matches!(RateSpec::parse("fast"), Err(RateError::Syntax(_))));
        assert!(matches!(
            RateSpec::parse("10Tbit"),
            Err(RateError::Syntax(_))
        ));
        assert!(matches!(
            RateSpec::parse("10 furlongs"),
            Err(RateError::Syntax(_))
        ));
        assert!(matches!(RateSpec::parse(""), Err(RateError::Syntax(_))));
    }

    #[test]
    fn bit_rate_counts_ethernet_header_and_payload() {
        // 64-byte messages -> 78-byte frames -> 624 bits.
        let Load::Rate { pps } = RateSpec::Bps(624e6).to_load(64) else {
            panic!()
        };
        assert!((pps - 1e6).abs() < 1e-6);
        assert_eq!(RateSpec::Closed.to_load(64), Load::ClosedLoop);
    }

    #[test]
    fn pacer_releases_at_the_rate() {
        // 1 Mpps: one packet per 1000 ns, packet 0 due at start.
        let mut p = Pacer::new(1e6, 10_000, 1000);
        assert_eq!(p.due(9_000), 0, "nothing is due before the start");
        assert_eq!(p.due(10_000), 1);
        assert_eq!(p.due(10_999), 0);
        assert_eq!(p.next_due_ns(), 11_000);
        assert_eq!(p.due(11_000), 1);
        assert_eq!(p.due(20_500), 9);
        assert_eq!(p.next_due_ns(), 21_000);
        // Over a long stretch the count equals rate x time exactly.
        assert_eq!(p.due(1_010_000 - 1), 1000 - 11);
        assert_eq!(p.skipped(), 0);
    }

    #[test]
    fn pacer_unsend_and_backlog_cap() {
        let mut p = Pacer::new(1e6, 0, 16);
        assert_eq!(p.due(4_000), 5);
        p.unsend(2);
        assert_eq!(p.due(4_000), 2, "given-back packets are due again");
        // Fall 1 ms behind: only 16 are released, the rest are skipped.
        assert_eq!(p.due(1_004_000), 16);
        assert_eq!(p.skipped(), 1000 - 16);
        assert_eq!(p.due(1_004_999), 0);
        assert_eq!(p.due(1_005_000), 1);
    }

    #[test]
    fn pacer_bursts_span_the_gap() {
        // 300k/s: one packet per 3333.3 ns; 100 µs holds 30 of them.
        let mut p = Pacer::new(300e3, 0, 1024);
        assert_eq!(p.burst_len(100_000, 64), 30);
        assert_eq!(p.burst_len(100_000, 16), 16, "capped");
        assert_eq!(p.burst_len(0, 64), 1, "at least one packet");
        // 1k/s: one packet already spans the gap.
        assert_eq!(Pacer::new(1e3, 0, 1).burst_len(100_000, 64), 1);
        assert_eq!(p.burst_due_ns(1), p.next_due_ns());
        assert_eq!(p.burst_due_ns(30), 96_667);
        assert_eq!(p.due(96_666), 29, "one short just before");
        p.unsend(29);
        // Waking at that time, the whole burst is due.
        assert_eq!(p.due(96_667), 30);
        assert_eq!(p.burst_due_ns(30), 196_667);
        assert_eq!(p.burst_due_ns(0), p.next_due_ns());
    }

    #[test]
    fn pacer_fractional_interval_does_not_drift() {
        // 3 pps -> 333_333_333.3 ns interval: after 10 s exactly 31 packets (0..=30) are due.
        let mut p = Pacer::new(3.0, 0, u64::MAX);
        assert_eq!(p.due(10_000_000_000), 31);
    }
}
