//! EE-KBP: busy-poll while there is work, sleep on the kick when there is
//! none, and move the core's frequency with it (EE-KBP paper, Algorithm 1).
//!
//! The paper's kernel thread, woken by the NIC's hardIRQ, sets its core to the
//! maximum frequency, polls every device on its `poll_list` for up to a quota
//! Q = 64 packets (NAPI's weight) round-robin, drops a device from the list
//! once its ring is empty (re-enabling its interrupt) and, when the list is
//! empty, sets the minimum frequency and sleeps. Here the guest's kick is the
//! hardIRQ ([`Action::WaitKick`](crate::Action::WaitKick) re-enables notifications and re-checks the
//! rings) and a pass over the worker's queues is one turn of the loop:
//!
//! - A pass that left work behind (`more_work`: some ring still had buffers
//!   when its quota ran out) keeps the worker polling ([`Decision::POLL`]).
//! - A pass that left every ring empty counts as empty; after `empty_passes`
//!   of them in a row (paper: 1) the worker waits for a kick with
//!   [`FreqHint::Min`]. A pass that moved packets and emptied the rings is the
//!   first of such a run; each further pass that finds nothing adds one.
//! - The first poll after a wait (kick, re-check or timeout) carries
//!   [`FreqHint::Max`]; later polls keep the frequency
//!   ([`FreqHint::Keep`]), so the core manager writes cpufreq only on the
//!   transitions.
//!
//! Departure: the paper raises the frequency *before* its first poll after a
//! wake; the policy interface only answers after a pass, so the first pass
//! after a wake runs at whatever frequency the core had. If that pass empties
//! the rings the worker goes back to sleep without ever raising it, which
//! saves a pointless pair of frequency switches for a lone packet.
//!
//! # Why EE-KBP equals `interrupt` mode on a vhost-user ring
//!
//! With its defaults, EE-KBP makes the same choice as
//! [`Interrupt`](crate::interrupt::Interrupt) after every pass: poll again
//! while a ring has work left, and re-enable notifications, re-check and
//! block on the kick eventfd once every ring is empty. BENCHMARKS.md's
//! recorded run shows it: EE-KBP's rate, CPU, kicks and latency are
//! interrupt mode's within the round-to-round spread in B1–B5 and B9 (B3
//! low rate: p99 233.5 against 215.6 µs; B4 idle: 0.06 against 0.07 % of a
//! core). That is not a flaw of either. The paper's three paths differ in
//! *where* the receive work runs, and a vhost-user backend has only one
//! place for it:
//!
//! - NAPI (the paper's baseline) does the protocol work in `NET_RX_SOFTIRQ`
//!   on whatever core took the hardIRQ, competing with timer and block
//!   softIRQs and with `ksoftirqd`'s scheduling: the ms-scale delays and the
//!   1.4–3.1× lower throughput the paper measures against EE-KBP. The
//!   simulator models that path in front of a worker (`[host.napi]`,
//!   `vadapt_sim::napi`) for PAPERS.md's Fig. 14 rows.
//! - KBP and EE-KBP move that work into a dedicated kernel thread that
//!   busy-polls; EE-KBP adds the sleep on an empty `poll_list` and the
//!   hardIRQ wake-up.
//! - A vhost-user queue worker already *is* such a dedicated thread: the
//!   guest's kick is an eventfd the worker blocks on, and no softIRQ sits
//!   between the kick and the service pass. Interrupt mode is therefore
//!   already EE-KBP's sleep-and-wake loop, and busy-poll is KBP.
//!
//! Where they do differ:
//!
//! - **Quota.** 64 packets a queue a pass (NAPI's weight) against
//!   vhost-net's 256 packets / 512 KiB: more, smaller passes, which matters
//!   only when one worker serves several busy queues (fairness between
//!   them), not to the rate of a single queue.
//! - **Frequency control.** [`FreqHint::Min`] while asleep and
//!   [`FreqHint::Max`] once a pass after a wake leaves work behind; interrupt
//!   mode sends none. On a host with cpufreq's `userspace` governor this is
//!   the paper's frequency saving, 2–4 W over its two polling threads (host
//!   and guest: about 1–2 W a thread, none at 1 Gbps 64 B; §5.1), on top of
//!   the 3 W that sleeping saves over KBP; on hosts without
//!   cpufreq (the development machines) it does nothing, which is why the
//!   benchmarks cannot tell the two policies apart. The simulator's power
//!   model shows the difference (PAPERS.md, EE-KBP). Several ports' hints
//!   and vSPACE-E may address one CPU: who owns its frequency then is
//!   written in `docs/cpu-frequency.md`.
//! - **A NIC uplink** (the AF_XDP uplink, `dataplane/src/uplink/`). There
//!   the host kernel's NAPI does sit between the NIC and vadapt, and the
//!   uplink's worker runs EE-KBP as today's kernel offers it: preferred
//!   busy polling on the queue's AF_XDP socket (`SO_PREFER_BUSY_POLL`,
//!   `SO_BUSY_POLL`, `SO_BUSY_POLL_BUDGET` = the quota) with the
//!   interface's IRQ deferral (`napi_defer_hard_irqs`, `gro_flush_timeout`),
//!   so that each pass's `recvfrom` runs the NAPI poll in the worker while
//!   packets arrive, and an epoll sleep on the socket (the re-armed IRQ)
//!   when the queue is empty (`dataplane/src/uplink/busy_poll.rs`).
//!   Interrupt mode sets none of it. In copy mode, the only mode a veth
//!   has, the kernel (6.13 and later) gives the socket no NAPI id, so
//!   nothing is busy-polled there and only the deferral acts:
//!   docs/uplink.md and BENCHMARKS.md (B10 by load) give what it changes.

use crate::error::ConfigError;
use crate::interface::{Budget, Decision, FreqHint, PassReport, Policy, PolicyStatus, WakeCause};
use crate::retune::{self, Retune, RetuneError};
use crate::time::Instant;
use serde::{Deserialize, Serialize};

/// EE-KBP parameters (EE-KBP paper, Algorithm 1).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EekbpParams {
    /// Packets per queue per busy-poll pass (NAPI's default weight, 64).
    pub quota: u32,
    /// Consecutive empty passes before the worker goes to sleep (1 = at once).
    pub empty_passes: u32,
}

impl Default for EekbpParams {
    fn default() -> Self {
        EekbpParams {
            quota: 64,
            empty_passes: 1,
        }
    }
}

/// EE-KBP hybrid busy-poll / sleep-on-kick. See the module documentation.
#[derive(Debug, Clone)]
pub struct EeKbp {
    params: EekbpParams,
    /// Consecutive passes that ended with every ring empty.
    empty_run: u32,
    /// True between a wake and the first poll decision after it.
    woken: bool,
}

impl EeKbp {
    /// Check every parameter; the error names the first bad one.
    pub fn validate(p: &EekbpParams) -> Result<(), ConfigError> {
        if p.quota == 0 {
            return Err(ConfigError::InvalidParam {
                param: "quota",
                reason: "must be at least 1 packet".into(),
            });
        }
        if p.empty_passes == 0 {
            return Err(ConfigError::InvalidParam {
                param: "empty_passes",
                reason: "must be at least 1 (1 = sleep as soon as the rings are empty)".into(),
            });
        }
        Ok(())
    }

    /// An EE-KBP policy.
    pub fn new(params: EekbpParams) -> Result<Self, ConfigError> {
        Self::validate(&params)?;
        Ok(EeKbp {
            params,
            empty_run: 0,
            woken: false,
        })
    }

    fn sleep(&mut self) -> Decision {
        self.empty_run = 0;
        Decision::WAIT_KICK.with_freq(FreqHint::Min)
    }
}

impl Policy for EeKbp {
    fn name(&self) -> &'static str {
        "eekbp"
    }

    /// NAPI's quota per queue; no byte limit (NAPI has none).
    fn budget(&self) -> Budget {
        Budget {
            packets: self.params.quota,
            bytes: u64::MAX,
        }
    }

    /// The thread starts asleep, at the minimum frequency.
    fn start(&mut self, _now: Instant) -> Decision {
        self.woken = false;
        self.sleep()
    }

    fn on_pass(&mut self, pass: &PassReport) -> Decision {
        if matches!(
            pass.wake,
            WakeCause::Kick | WakeCause::Recheck | WakeCause::Timeout
        ) {
            self.woken = true;
        }
        if pass.more_work {
            self.empty_run = 0;
        } else if pass.packets > 0 || pass.bytes > 0 {
            self.empty_run = 1;
        } else {
            self.empty_run = self.empty_run.saturating_add(1);
        }
        if !pass.more_work && self.empty_run >= self.params.empty_passes {
            self.woken = false;
            return self.sleep();
        }
        if std::mem::take(&mut self.woken) {
            Decision::POLL.with_freq(FreqHint::Max)
        } else {
            Decision::POLL
        }
    }

    fn status(&self) -> PolicyStatus {
        PolicyStatus::default()
    }

    fn retune(&mut self, r: &Retune) -> Result<(), RetuneError> {
        match *r {
            Retune::Quota { packets } => {
                let new = EekbpParams {
                    quota: packets,
                    ..self.params
                };
                retune::apply(&mut self.params, new, Self::validate)
            }
            _ => Err(r.not_applicable(self.name())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interface::Action;
    use crate::time::Duration;

    fn report(wake: WakeCause, packets: u64, more_work: bool) -> PassReport {
        PassReport {
            packets,
            bytes: packets * 64,
            more_work,
            ..PassReport::empty(Instant(0), wake, Duration::ZERO)
        }
    }

    #[test]
    fn algorithm_1_cycle() {
        let mut p = EeKbp::new(EekbpParams::default()).unwrap();
        assert_eq!(p.budget().packets, 64);
        let sleep = Decision::WAIT_KICK.with_freq(FreqHint::Min);
        assert_eq!(p.start(Instant(0)), sleep);
        // Kick, a full quota with more behind: poll at max frequency.
        assert_eq!(
            p.on_pass(&report(WakeCause::Kick, 64, true)),
            Decision::POLL.with_freq(FreqHint::Max)
        );
        // Still busy: keep polling, frequency unchanged.
        assert_eq!(
            p.on_pass(&report(WakeCause::Immediate, 64, true)),
            Decision::POLL
        );
        // Ring emptied: sleep at min frequency (paper: at once).
        assert_eq!(p.on_pass(&report(WakeCause::Immediate, 10, false)), sleep);
        // A lone packet: woken, served, back to sleep, no Max in between.
        assert_eq!(p.on_pass(&report(WakeCause::Kick, 1, false)), sleep);
        // Re-check found work: same as a kick.
        assert_eq!(
            p.on_pass(&report(WakeCause::Recheck, 64, true)),
            Decision::POLL.with_freq(FreqHint::Max)
        );
        let s = p.status();
        assert!(!s.settled);
        assert_eq!(s.interval, None);
    }

    #[test]
    fn empty_passes_delays_sleep() {
        let mut p = EeKbp::new(EekbpParams {
            quota: 8,
            empty_passes: 3,
        })
        .unwrap();
        p.start(Instant(0));
        assert_eq!(
            p.on_pass(&report(WakeCause::Kick, 5, false)),
            Decision::POLL.with_freq(FreqHint::Max)
        );
        assert_eq!(
            p.on_pass(&report(WakeCause::Immediate, 0, false)),
            Decision::POLL
        );
        // New packets restart the run.
        assert_eq!(
            p.on_pass(&report(WakeCause::Immediate, 2, false)),
            Decision::POLL
        );
        assert_eq!(
            p.on_pass(&report(WakeCause::Immediate, 0, false)),
            Decision::POLL
        );
        let d = p.on_pass(&report(WakeCause::Immediate, 0, false));
        assert_eq!(d.action, Action::WaitKick { timeout: None });
        assert_eq!(d.freq, FreqHint::Min);
    }

    #[test]
    fn validate() {
        for (p, name) in [
            (
                EekbpParams {
                    quota: 0,
                    empty_passes: 1,
                },
                "quota",
            ),
            (
                EekbpParams {
                    quota: 64,
                    empty_passes: 0,
                },
                "empty_passes",
            ),
        ] {
            match EeKbp::new(p) {
                Err(ConfigError::InvalidParam { param, .. }) => assert_eq!(param, name),
                other => panic!("expected error on {name}, got {other:?}"),
            }
        }
    }
}
