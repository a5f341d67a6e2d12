//! The synthetic guest: a vhost-user **frontend** that behaves like a Linux virtio-net driver
//! under a netperf-style load. It powers vadapt's demo, tests, benchmarks and the calibration
//! of the simulator.
//!
//! ```no_run
//! use std::sync::{atomic::AtomicBool, Arc};
//! use vadapt_guest::{Guest, GuestConfig};
//!
//! let mut cfg = GuestConfig::new("/tmp/vm1.sock");
//! cfg.threads = 3;
//! let guest = Guest::connect(cfg)?;
//! let live = guest.counters(); // readable while the guest runs
//! let report = guest.run(Arc::new(AtomicBool::new(false)))?;
//! println!("{} packets, {} kicks", report.totals.sent_packets, report.totals.kicks);
//! # Ok::<(), vadapt_guest::GuestError>(())
//! ```
//!
//! # What it emulates
//!
//! * **The device, as QEMU sets it up** ([`frontend`]): one memfd of guest memory shared with
//!   `SET_MEM_TABLE`, feature negotiation as a Linux guest (`VERSION_1`, `MAC`, `MRG_RXBUF`,
//!   `EVENT_IDX`, `IN_ORDER`, `INDIRECT_DESC`, `STATUS`, `MQ` + `CTRL_VQ` when offered, and
//!   `CSUM` + `HOST_TSO4` in TCP-stream mode, `RING_PACKED` with `--packed auto` or `on`
//!   (default `off`, as QEMU's `packed=off`); protocol features `MQ`, `CONFIG`, `REPLY_ACK`),
//!   one queue pair per thread as far as the backend offers pairs, rings enabled with
//!   `SET_VRING_ENABLE`.
//! * **The driver** ([`driver`]): TX like `start_xmit` (one descriptor per packet, kicks only
//!   when the backend's `NO_NOTIFY` flag or EVENT_IDX `avail_event` ask for one, queue stopped
//!   with `enable_cb_delayed` when the ring runs low), RX like NAPI (budget 64, re-enable and
//!   re-check), on split or packed rings alike. The notification rules themselves are
//!   `vadapt_virtq`'s `AnyDriverQueue` (its split `DriverQueue` or packed
//!   `PackedDriverQueue`).
//! * **The application** ([`app`]): netperf-like threads, stream or request/response, closed loop or a
//!   fixed rate ([`load`]; [`load::Pacing`] says whether a paced sender spins through short
//!   gaps, as pktgen, or sleeps between bursts, as `fq`). The stream is raw Ethernet frames, one per message (packet-rate
//!   benchmarks), or a TCP stream as Linux's TCP with TSO hands it to the driver: messages
//!   coalesced into segments of up to 64 KiB whose checksum and segmentation the backend does
//!   ([`tcp_stream`], `vadapt_wire::tcp_build`; `VIRTIO_NET_F_CSUM` and `HOST_TSO4` acknowledged in
//!   that mode only).
//!
//! # Emulated VM-exit cost (`--exit-cost-ns`, default 2000 ns)
//!
//! This guest runs as an ordinary process, so a kick is an `eventfd` write and a call is an
//! `eventfd` read: both cost far less than in a VM. On a KVM host, a kick is a trapped
//! doorbell write — a VM exit, KVM's handling and a VM entry — and a call is an interrupt
//! injection followed by the guest's interrupt entry, handler and EOI, which usually costs an
//! exit of its own. Published measurements put a VM exit/entry round trip on recent x86 at
//! roughly 1–1.5 µs of direct cost, and the indirect cost (caches and TLB polluted by the
//! switch) at about as much again (Gordon et al., "ELI: Bare-metal performance for I/O
//! virtualization", ASPLOS 2012; Amit et al., "Bare-metal performance for virtual machines
//! with exitless interrupts", CACM 2016). The default, **2000 ns per kick and per handled
//! call**, is the middle of that "a few microseconds" range. The guest emulates it by
//! busy-waiting that long on the thread that kicked or took the call, so that notification
//! traffic costs the sender CPU time the way it costs a vCPU. **It is an emulation**: no VM
//! exit happens, the host scheduler sees a busy thread, and the value should be calibrated
//! against a real KVM host when one is available. `--exit-cost-ns 0` turns it off (to
//! measure the backend's ceiling).
//!
//! # Emulated write cost (`--write-cost-ns`, `--write-cost-ns-per-kib`; TCP stream only)
//!
//! The papers' netperf senders pay the guest kernel's cost for every `send()`, so the
//! writer, not the device, sets the rate, and small messages cost more per byte. In
//! `--mode tcp-stream` every application write busy-waits a fixed part plus a part per KiB
//! ([`config::DEFAULT_WRITE_COST_NS`], [`config::DEFAULT_WRITE_COST_NS_PER_KIB`]): the
//! sender's CPU time per blocking loopback `send()` measured on this project's machine by
//! `examples/write_cost.rs`. Loopback runs the receiver's softirq in the sender's context and
//! has no device, so this too **is an estimate**, to be measured again where a real guest
//! runs; the README gives the measurement and its spread.
//!
//! # Seen from the core manager
//!
//! `--qmp PATH` ([`vadapt_qemu::server::qmp_server`]) makes the guest discoverable as a QEMU VM is: its QMP socket
//! lists the sending threads as vCPUs (`query-cpus-fast`) and pauses them (`stop` / `cont`),
//! so the daemon's core manager (`--vm ...,qmp=PATH`) has one discovery path for both.
//! `--cores-control PATH` ([`cores_report`]) with `--mode rr` sends each period's P95 round
//! trip to the daemon's control socket, closing vSPACE's threshold loop end to end.
//!
//! # Counters
//!
//! All counters are in [`metrics`] (packets, bytes, kicks, calls, ring-full stalls, latency
//! histogram); [`Guest::counters`] reads them live, [`GuestReport`] holds them at the end.

#![deny(missing_docs)]

pub mod app;
pub mod cli;
pub mod clock;
pub mod config;
pub mod cores_report;
pub mod driver;
pub mod frontend;
pub mod guest;
pub mod load;
pub mod metrics;
pub mod period_latency;
mod shared;
pub mod tcp_stream;

#[cfg(test)]
mod loopback;

pub use cli::{run_cli, GuestArgs};
pub use config::{ConfigError, GuestConfig, Mode, PackedRing};
pub use guest::{Guest, GuestError};
pub use load::Load;
pub use metrics::{
    Counts, DirtyLogReport, GuestCounters, GuestReport, LatencySummary, RingKind, ThreadReport,
};
