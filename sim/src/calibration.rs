//! The model's costs: what one packet, pass, kick, call and wake-up cost.
//!
//! A [`Calibration`] is a flat TOML table (see `sim/calibration/default.toml`,
//! which also says where each number comes from). `vadapt calibrate` writes
//! the same format from measurements; scenarios `include` a file or embed a
//! `[calibration]` table.

use serde::{Deserialize, Serialize};

/// The bundled default calibration (`sim/calibration/default.toml`).
pub const DEFAULT_TOML: &str = include_str!("../calibration/default.toml");
/// The bundled calibration measured on the development machine by `vadapt
/// calibrate` (`sim/calibration/measured.toml`), for scenarios that model
/// the daemon and synthetic guests there (`vadapt bench`'s B9).
pub const MEASURED_TOML: &str = include_str!("../calibration/measured.toml");

/// A calibration value was out of range.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CalibrationError {
    /// A cost is negative or not finite; `key` names it as in the file.
    #[error("calibration key `{key}` must be a finite number >= 0 (got {value})")]
    Negative {
        /// Key name as in the file.
        key: &'static str,
        /// The offending value.
        value: f64,
    },
    /// `jitter` must be in [0, 1).
    #[error("calibration key `jitter` must be in [0, 1) (got {0})")]
    Jitter(f64),
}

/// Costs charged by the model. All times are nanoseconds of the CPU that pays
/// them (the worker's core for host costs, the vCPU for guest costs), at the
/// highest CPU frequency.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// Machine the numbers were measured on (free text, for reports).
    pub machine: String,
    /// How the numbers were obtained (free text).
    pub source: String,
    /// Worker CPU per packet taken from a ring, ns (descriptor walk, copy of the
    /// first 64 bytes, used-ring write).
    pub per_packet_ns: f64,
    /// Worker CPU per frame byte, picoseconds (copy cost beyond the fixed part).
    pub per_byte_ps: f64,
    /// Worker CPU per service pass, ns (ring index reads, used.idx publish).
    pub pass_overhead_ns: f64,
    /// Worker CPU per packet to hand it to the NIC / host port, ns.
    pub nic_packet_ns: f64,
    /// vCPU time lost per guest kick (VM exit + ioeventfd + entry), ns.
    pub kick_ns: f64,
    /// vCPU time lost per call (interrupt injection + guest handler), ns.
    pub call_ns: f64,
    /// Worker CPU per call it sends a request-response guest (irqfd signal
    /// and KVM's vIRQ injection on the host side), ns. Optional, default 0:
    /// only the vSPACE host (`calibration/vspace-host.toml`) charges it.
    #[serde(default)]
    pub call_host_ns: f64,
    /// Delay from a kick (or a call to a halted vCPU) to the woken thread
    /// running, ns.
    pub wake_latency_ns: f64,
    /// Host CPU burnt per wake-up of a blocked worker, ns (kernel wake-up path).
    pub wakeup_cpu_ns: f64,
    /// How late a sleep's timer fires on average, ns.
    pub timer_overshoot_ns: f64,
    /// Cost of one context switch, ns; charged per worker wake-up and per
    /// scheduler time slice when cores are oversubscribed.
    pub context_switch_ns: f64,
    /// Relative spread of wake-up latencies and timer overshoots: each is drawn
    /// uniformly in `[1 - jitter, 1 + jitter]` times its value. Unitless, in [0, 1).
    pub jitter: f64,
}

impl Default for Calibration {
    fn default() -> Self {
        // The bundled file is checked by a unit test, so this cannot fail at run time.
        toml::from_str(DEFAULT_TOML).expect("bundled calibration/default.toml parses")
    }
}

impl Calibration {
    /// Check every value; the error names the first bad key.
    pub fn validate(&self) -> Result<(), CalibrationError> {
        let fields: [(&'static str, f64); 11] = [
            ("per_packet_ns", self.per_packet_ns),
            ("per_byte_ps", self.per_byte_ps),
            ("pass_overhead_ns", self.pass_overhead_ns),
            ("nic_packet_ns", self.nic_packet_ns),
            ("kick_ns", self.kick_ns),
            ("call_ns", self.call_ns),
            ("call_host_ns", self.call_host_ns),
            ("wake_latency_ns", self.wake_latency_ns),
            ("wakeup_cpu_ns", self.wakeup_cpu_ns),
            ("timer_overshoot_ns", self.timer_overshoot_ns),
            ("context_switch_ns", self.context_switch_ns),
        ];
        for (key, value) in fields {
            if !(value.is_finite() && value >= 0.0) {
                return Err(CalibrationError::Negative { key, value });
            }
        }
        if !(self.jitter >= 0.0 && self.jitter < 1.0) {
            return Err(CalibrationError::Jitter(self.jitter));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_default_parses_and_is_valid() {
        let c = Calibration::default();
        c.validate().unwrap();
        assert!(c.machine.contains("EPYC"));
    }

    #[test]
    fn bundled_measured_parses_and_is_valid() {
        let c: Calibration = toml::from_str(MEASURED_TOML).unwrap();
        c.validate().unwrap();
        assert_ne!(c, Calibration::default());
    }

    #[test]
    fn call_host_ns_is_optional_and_only_the_vspace_host_charges_it() {
        assert_eq!(Calibration::default().call_host_ns, 0.0);
        let host: Calibration =
            toml::from_str(include_str!("../calibration/vspace-host.toml")).unwrap();
        host.validate().unwrap();
        assert!(host.call_host_ns > 0.0);
        let bad = Calibration {
            call_host_ns: f64::NAN,
            ..Calibration::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(CalibrationError::Negative {
                key: "call_host_ns",
                ..
            })
        ));
    }

    #[test]
    fn negative_cost_is_rejected_by_name() {
        let c = Calibration {
            kick_ns: -1.0,
            ..Calibration::default()
        };
        assert_eq!(
            c.validate(),
            Err(CalibrationError::Negative {
                key: "kick_ns",
                value: -1.0
            })
        );
    }
}
