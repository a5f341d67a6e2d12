//! Which guest-side offloads a VM port's receiver takes now, and the
//! control command that changes them (`VIRTIO_NET_CTRL_GUEST_OFFLOADS_SET`,
//! what Linux sends on `ethtool -K eth0 rx-gro-hw off`, or when an XDP
//! program is attached).
//!
//! The state is the port's, not a worker's: the negotiated set is written
//! when the frontend acks its features, the control command narrows or
//! widens it within that set, and the receive path reads it once per pass
//! (one relaxed load), so a change applies from the next pass.
//!
//! The control queue itself does not reach a vhost-user backend: QEMU and
//! DPDK's virtio-user answer it in the frontend (QEMU acks
//! `GUEST_OFFLOADS_SET` and has no vhost-user message to pass it on), so
//! with those frontends the set stays what was negotiated — a guest whose
//! offloads must be off is started with them off (`guest_tso4=off`, …).
//! [`GuestOffloadState::ctrl_command`] is the device's answer for a
//! frontend that does forward its control queue, and the one place that
//! decides it.

use crate::net::{ctrl, GuestOffloads, GUEST_OFFLOAD_BITS};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why `VIRTIO_NET_CTRL_GUEST_OFFLOADS_SET` was refused (`VIRTIO_NET_ERR`).
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum GuestOffloadsRefused {
    /// The command is not `class 5, command 0`.
    #[error("unknown control command class {class} command {command}")]
    UnknownCommand {
        /// `virtio_net_ctrl_hdr.class`.
        class: u8,
        /// `virtio_net_ctrl_hdr.cmd`.
        command: u8,
    },
    /// The data is not one le64.
    #[error("GUEST_OFFLOADS_SET carries {0} bytes, not 8")]
    BadLength(usize),
    /// Bits that are not guest offloads the driver negotiated.
    #[error("offload bits {0:#x} were not negotiated")]
    NotNegotiated(u64),
}

/// A port's guest-side offloads: negotiated, and enabled now.
#[derive(Debug, Default)]
pub struct GuestOffloadState {
    /// Guest-offload feature bits the frontend acked.
    negotiated: AtomicU64,
    /// The subset enabled now.
    enabled: AtomicU64,
}

impl GuestOffloadState {
    /// The frontend acked `features`: every guest offload among them is on
    /// (the spec's state after feature negotiation).
    pub fn negotiate(&self, features: u64) {
        let bits = features & GUEST_OFFLOAD_BITS;
        self.negotiated.store(bits, Ordering::Relaxed);
        self.enabled.store(bits, Ordering::Relaxed);
    }

    /// What the receiver takes now.
    pub fn accepted(&self) -> GuestOffloads {
        GuestOffloads::from_bits(self.enabled.load(Ordering::Relaxed))
    }

    /// `VIRTIO_NET_CTRL_GUEST_OFFLOADS_SET` with `offloads`: refused if a
    /// bit is not a negotiated guest offload (the device must answer
    /// `VIRTIO_NET_ERR`, virtio 1.2 §5.1.6.5.6.1), else the enabled set.
    pub fn set(&self, offloads: u64) -> Result<GuestOffloads, GuestOffloadsRefused> {
        let extra = offloads & !self.negotiated.load(Ordering::Relaxed);
        if extra != 0 {
            return Err(GuestOffloadsRefused::NotNegotiated(extra));
        }
        self.enabled.store(offloads, Ordering::Relaxed);
        Ok(GuestOffloads::from_bits(offloads))
    }

    /// The answer to a control command (`class`, `command`, its data) of
    /// the guest-offloads class: [`ctrl::OK`] or [`ctrl::ERR`], with the
    /// reason for a refusal. The data is guest-controlled: any length.
    pub fn ctrl_command(
        &self,
        class: u8,
        command: u8,
        data: &[u8],
    ) -> (u8, Option<GuestOffloadsRefused>) {
        let r = if class != ctrl::CLASS_GUEST_OFFLOADS || command != ctrl::GUEST_OFFLOADS_SET {
            Err(GuestOffloadsRefused::UnknownCommand { class, command })
        } else {
            match <[u8; 8]>::try_from(data) {
                Ok(b) => self.set(u64::from_le_bytes(b)).map(|_| ()),
                Err(_) => Err(GuestOffloadsRefused::BadLength(data.len())),
            }
        };
        match r {
            Ok(()) => (ctrl::OK, None),
            Err(e) => (ctrl::ERR, Some(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::{
        VIRTIO_NET_F_CSUM, VIRTIO_NET_F_GUEST_CSUM, VIRTIO_NET_F_GUEST_TSO4,
        VIRTIO_NET_F_GUEST_TSO6, VIRTIO_NET_F_MRG_RXBUF,
    };

    fn set_cmd(s: &GuestOffloadState, bits: u64) -> u8 {
        s.ctrl_command(5, 0, &bits.to_le_bytes()).0
    }

    #[test]
    fn negotiated_offloads_start_on_and_the_command_turns_them_off_and_on() {
        let s = GuestOffloadState::default();
        s.negotiate(
            VIRTIO_NET_F_CSUM
                | VIRTIO_NET_F_GUEST_CSUM
                | VIRTIO_NET_F_GUEST_TSO4
                | VIRTIO_NET_F_MRG_RXBUF,
        );
        let a = s.accepted();
        assert!(a.csum && a.tso4 && !a.tso6 && !a.ecn);
        assert_eq!(set_cmd(&s, VIRTIO_NET_F_GUEST_CSUM), ctrl::OK);
        let a = s.accepted();
        assert!(a.csum && !a.tso4, "TSO off, checksum kept");
        assert_eq!(set_cmd(&s, 0), ctrl::OK);
        assert_eq!(s.accepted(), GuestOffloads::default());
        assert_eq!(
            set_cmd(&s, VIRTIO_NET_F_GUEST_CSUM | VIRTIO_NET_F_GUEST_TSO4),
            ctrl::OK
        );
        assert!(s.accepted().tso4);
    }

    #[test]
    fn bits_not_negotiated_and_malformed_commands_are_refused() {
        let s = GuestOffloadState::default();
        s.negotiate(VIRTIO_NET_F_GUEST_CSUM | VIRTIO_NET_F_GUEST_TSO4);
        let before = s.accepted();
        assert_eq!(
            s.ctrl_command(5, 0, &VIRTIO_NET_F_GUEST_TSO6.to_le_bytes()),
            (
                ctrl::ERR,
                Some(GuestOffloadsRefused::NotNegotiated(VIRTIO_NET_F_GUEST_TSO6))
            )
        );
        assert_eq!(
            set_cmd(&s, 1 << 40),
            ctrl::ERR,
            "not a guest offload at all"
        );
        assert_eq!(
            s.ctrl_command(5, 0, &[0; 7]).1,
            Some(GuestOffloadsRefused::BadLength(7))
        );
        assert_eq!(
            s.ctrl_command(5, 1, &[0; 8]).1,
            Some(GuestOffloadsRefused::UnknownCommand {
                class: 5,
                command: 1
            })
        );
        assert_eq!(s.accepted(), before, "a refusal changes nothing");
    }
}
