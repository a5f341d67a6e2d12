//! `vadapt capture`'s writer: what a capture asks for ([`CaptureSpec`]),
//! and the loop that takes its frames from the port's tap and writes them
//! as pcapng, on a thread of its own, never a worker's.
//!
//! The stream is one pcapng section: a section header, one interface (the
//! port: `if_name` its name, link type Ethernet, nanosecond timestamps,
//! the capture's snap length), an enhanced packet block per frame with
//! its direction in `epb_flags` (inbound: the port received it from its
//! VM; outbound: the switch handed it to the port) and, for received
//! frames, the queue in its comment (`queue N`: the `pcap-file` crate
//! cannot write `epb_queue`), and at the end an interface
//! statistics block: frames the tap saw (`isb_ifrecv`) and those it could
//! not keep (`isb_ifdrop`, the port's `capture_dropped`).
//!
//! It ends at the first of: the frame count written, the duration passed,
//! the client gone (it closed or shut down its side), the port removed,
//! the daemon stopping (`crate::capture_threads`); the ending's statistics
//! block is written and flushed first.

use crate::switch::{
    CaptureDir, CaptureError, CaptureFilter, CaptureFilterError, CaptureSession, CapturedFrame,
    Crossed, MAX_SNAPLEN,
};
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::interface_statistics::{
    InterfaceStatisticsBlock, InterfaceStatisticsOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What `vadapt capture` asks for.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CaptureSpec {
    /// The port's name.
    pub port: String,
    /// Which way the frames crossed the port.
    #[serde(default)]
    pub dir: CaptureDir,
    /// Only frames received on this queue (with `dir` `rx` only).
    #[serde(default)]
    pub queue: Option<u16>,
    /// Bytes kept of each frame, 1 to [`MAX_SNAPLEN`].
    #[serde(default = "max_snaplen")]
    pub snaplen: u32,
    /// Stop after this many frames written (`None`: no limit).
    #[serde(default)]
    pub count: Option<u64>,
    /// Stop after this long, ms (`None`: no limit).
    #[serde(default)]
    pub duration_ms: Option<u64>,
}

fn max_snaplen() -> u32 {
    MAX_SNAPLEN
}

impl CaptureSpec {
    /// The tap's filter, if the spec asks for one that can be.
    pub fn filter(&self) -> Result<CaptureFilter, CaptureFilterError> {
        CaptureFilter::new(self.dir, self.queue, self.snaplen)
    }
}

/// Why a capture did not start.
#[derive(Debug, thiserror::Error)]
pub enum CaptureStartError {
    /// It asks for what no tap can take.
    #[error(transparent)]
    Filter(#[from] CaptureFilterError),
    /// The switch refused it (no such port, captured already).
    #[error(transparent)]
    Switch(#[from] CaptureError),
    /// This control server captures nothing (no switch behind it).
    #[error("this control server has no ports to capture")]
    Unavailable,
}

/// Why a capture ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureEnd {
    /// It wrote the frames it was asked for.
    Count,
    /// Its duration passed.
    Duration,
    /// The client closed or shut down its side.
    ClientGone,
    /// The port left the switch.
    PortRemoved,
    /// The daemon is stopping.
    DaemonStopping,
}

/// What a capture wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaptureSummary {
    /// Why it ended.
    pub end: CaptureEnd,
    /// Frames written.
    pub written: u64,
    /// Frames the tap could not keep.
    pub dropped: u64,
}

/// Why a capture's stream broke off.
#[derive(Debug, thiserror::Error)]
pub enum CaptureStreamError {
    /// Writing pcapng to the client failed (it went away, or stopped
    /// reading for longer than the socket's send timeout).
    #[error("cannot write the capture")]
    Write(#[source] pcap_file::PcapError),
    /// Flushing it failed.
    #[error("cannot flush the capture")]
    Flush(#[source] std::io::Error),
}

/// The pcapng `epb_flags` of a frame: its direction (bits 0-1).
fn direction_flags(c: Crossed) -> u32 {
    match c {
        Crossed::Received => 1,
        Crossed::Sent => 2,
    }
}

/// Write the capture `session` takes as `spec` limits it to `out`, as
/// pcapng (see the module docs), until it ends. After every drain
/// `stopping` is looked at (set: the daemon stops), and `client_gone` is
/// asked, with how long it may wait, whether the client has gone.
pub fn write_capture<W: Write>(
    session: &CaptureSession,
    spec: &CaptureSpec,
    out: W,
    stopping: &AtomicBool,
    mut client_gone: impl FnMut(Duration) -> bool,
) -> Result<CaptureSummary, CaptureStreamError> {
    let tap = session.tap();
    let started = Instant::now();
    let started_wall = crate::clock::since_epoch();
    let deadline = spec
        .duration_ms
        .map(|ms| started + Duration::from_millis(ms));
    let mut w = PcapNgWriter::new(out).map_err(CaptureStreamError::Write)?;
    let dir = match spec.dir {
        CaptureDir::Rx => "frames it received from its VM (inbound)",
        CaptureDir::Tx => "frames the switch handed it for its VM (outbound)",
        CaptureDir::Both => "both ways",
    };
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: DataLink::ETHERNET,
        snaplen: tap.filter().snaplen(),
        options: vec![
            InterfaceDescriptionOption::IfName(Cow::Borrowed(spec.port.as_str())),
            InterfaceDescriptionOption::IfDescription(Cow::Owned(format!(
                "vadapt port {}, at its switch: {dir}",
                spec.port
            ))),
            InterfaceDescriptionOption::IfTsResol(9),
        ],
    })
    .map_err(CaptureStreamError::Write)?;
    let flush = |w: &mut PcapNgWriter<W>| w.get_mut().flush().map_err(CaptureStreamError::Flush);
    flush(&mut w)?;
    let mut written = 0u64;
    let end = loop {
        let mut took = false;
        // At most one drain's worth before the limits, the daemon and the
        // client are looked at again: a port sending faster than the
        // writer keeps the buffer from ever emptying.
        let mut drained = 0;
        while spec.count.is_none_or(|c| written < c) && drained < MAX_DRAIN {
            let Some(f) = tap.take() else { break };
            write_frame(&mut w, &f)?;
            written += 1;
            drained += 1;
            took = true;
        }
        flush(&mut w)?;
        if spec.count.is_some_and(|c| written >= c) {
            break CaptureEnd::Count;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break CaptureEnd::Duration;
        }
        if tap.is_detached() && !took {
            break CaptureEnd::PortRemoved;
        }
        if stopping.load(Ordering::Acquire) {
            break CaptureEnd::DaemonStopping;
        }
        // Busy: only look; idle: wait a while for frames (or the client).
        let wait = if took { Duration::ZERO } else { IDLE_WAIT };
        let wait = deadline.map_or(wait, |d| {
            wait.min(d.saturating_duration_since(Instant::now()))
        });
        if client_gone(wait) {
            break CaptureEnd::ClientGone;
        }
    };
    let dropped = tap.dropped();
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let now = crate::clock::since_epoch();
    w.write_pcapng_block(InterfaceStatisticsBlock {
        interface_id: 0,
        timestamp: ns(now),
        options: vec![
            InterfaceStatisticsOption::IsbStartTime(ns(started_wall)),
            InterfaceStatisticsOption::IsbEndTime(ns(now)),
            InterfaceStatisticsOption::IsbIfRecv(tap.kept() + dropped),
            InterfaceStatisticsOption::IsbIfDrop(dropped),
        ],
    })
    .map_err(CaptureStreamError::Write)?;
    flush(&mut w)?;
    Ok(CaptureSummary {
        end,
        written,
        dropped,
    })
}

/// Most frames written between two looks at the capture's limits, the
/// daemon's stop and the client.
const MAX_DRAIN: usize = 1024;

/// Longest the writer waits for frames before it looks at the client and
/// its limits again.
const IDLE_WAIT: Duration = Duration::from_millis(50);

fn write_frame<W: Write>(
    w: &mut PcapNgWriter<W>,
    f: &CapturedFrame,
) -> Result<(), CaptureStreamError> {
    let mut options = vec![EnhancedPacketOption::Flags(direction_flags(f.crossed))];
    if let Some(q) = f.queue {
        options.push(EnhancedPacketOption::Comment(Cow::Owned(format!(
            "queue {q}"
        ))));
    }
    w.write_pcapng_block(EnhancedPacketBlock {
        interface_id: 0,
        timestamp: f.at,
        original_len: f.len,
        data: Cow::Borrowed(&f.bytes),
        options,
    })
    .map_err(CaptureStreamError::Write)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::FrameBatch;
    use crate::metrics::{PortKind, PortStats};
    use crate::switch::{Egress, FdbCache, Switch};
    use pcap_file::pcapng::{Block, PcapNgReader};
    use std::sync::Arc;

    #[derive(Debug)]
    struct Nowhere;
    impl Egress for Nowhere {
        fn deliver(&self, _: &FrameBatch, _: &[u16], _: u16) {}
    }

    fn spec(count: Option<u64>, snaplen: u32) -> CaptureSpec {
        CaptureSpec {
            port: "b".into(),
            dir: CaptureDir::Both,
            queue: None,
            snaplen,
            count,
            duration_ms: None,
        }
    }

    fn switch() -> Arc<Switch> {
        let sw = Arc::new(Switch::new(Duration::from_secs(300)));
        for name in ["a", "b"] {
            sw.add_port(
                Arc::new(Nowhere),
                Arc::new(PortStats::new(name, PortKind::Vm, 1)),
            );
        }
        sw
    }

    /// Blocks of the pcapng `bytes`, in order.
    fn blocks(bytes: &[u8]) -> Vec<Block<'static>> {
        let mut r = PcapNgReader::new(bytes).expect("a section header");
        let mut v = Vec::new();
        while let Some(b) = r.next_block() {
            v.push(b.expect("a block").into_owned());
        }
        v
    }

    #[test]
    fn frames_are_written_as_pcapng_with_direction_queue_and_statistics() {
        let sw = switch();
        let sp = spec(None, 64);
        let session = sw.capture("b", sp.filter().unwrap()).unwrap();
        let mut b = FrameBatch::new(2);
        b.push(&[0xff; 60]); // from a: handed to b
        let long: Vec<u8> = (0..200u8).collect();
        let mut from_b = FrameBatch::new(1);
        from_b.push(&long); // b received it, on queue 2
        let mut cache = FdbCache::default();
        let _ = sw.forward(0, 0, &b, &mut cache);
        let _ = sw.forward(1, 2, &from_b, &mut cache);
        let mut out = Vec::new();
        let summary =
            write_capture(&session, &sp, &mut out, &AtomicBool::new(false), |_| true).unwrap();
        assert_eq!(summary.end, CaptureEnd::ClientGone);
        assert_eq!((summary.written, summary.dropped), (2, 0));
        let blocks = blocks(&out);
        let Block::InterfaceDescription(idb) = &blocks[0] else {
            panic!("{:?}", blocks[0])
        };
        assert_eq!((idb.linktype, idb.snaplen), (DataLink::ETHERNET, 64));
        assert!(idb
            .options
            .contains(&InterfaceDescriptionOption::IfName("b".into())));
        assert!(idb
            .options
            .contains(&InterfaceDescriptionOption::IfTsResol(9)));
        let Block::EnhancedPacket(sent) = &blocks[1] else {
            panic!("{:?}", blocks[1])
        };
        assert_eq!(&*sent.data, &[0xff; 60][..]);
        assert_eq!(sent.options, [EnhancedPacketOption::Flags(2)]);
        let Block::EnhancedPacket(got) = &blocks[2] else {
            panic!("{:?}", blocks[2])
        };
        assert_eq!((&*got.data, got.original_len), (&long[..64], 200));
        assert_eq!(
            got.options,
            [
                EnhancedPacketOption::Flags(1),
                EnhancedPacketOption::Comment("queue 2".into())
            ]
        );
        let Block::InterfaceStatistics(isb) = &blocks[3] else {
            panic!("{:?}", blocks[3])
        };
        assert!(isb
            .options
            .contains(&InterfaceStatisticsOption::IsbIfRecv(2)));
        assert!(isb
            .options
            .contains(&InterfaceStatisticsOption::IsbIfDrop(0)));
        assert_eq!(blocks.len(), 4);
    }

    #[test]
    fn a_count_ends_the_capture_and_the_port_is_free_after() {
        let sw = switch();
        let sp = spec(Some(3), MAX_SNAPLEN);
        let session = sw.capture("b", sp.filter().unwrap()).unwrap();
        let mut b = FrameBatch::new(5);
        for i in 0..5u8 {
            b.push(&[i; 60]);
        }
        let _ = sw.forward(1, 0, &b, &mut FdbCache::default());
        let mut out = Vec::new();
        let summary =
            write_capture(&session, &sp, &mut out, &AtomicBool::new(false), |_| false).unwrap();
        assert_eq!((summary.end, summary.written), (CaptureEnd::Count, 3));
        let packets = blocks(&out)
            .iter()
            .filter(|b| matches!(b, Block::EnhancedPacket(_)))
            .count();
        assert_eq!(packets, 3);
        drop(session);
        assert!(sw.capture("b", sp.filter().unwrap()).is_ok());
    }

    #[test]
    fn a_removed_port_ends_the_capture() {
        let sw = switch();
        let sp = spec(None, MAX_SNAPLEN);
        let session = sw.capture("b", sp.filter().unwrap()).unwrap();
        sw.remove_port(1);
        let summary = write_capture(&session, &sp, Vec::new(), &AtomicBool::new(false), |_| {
            false
        })
        .unwrap();
        assert_eq!(summary.end, CaptureEnd::PortRemoved);
    }

    #[test]
    fn a_stopping_daemon_ends_the_capture_with_its_statistics() {
        let sw = switch();
        let sp = spec(None, MAX_SNAPLEN);
        let session = sw.capture("b", sp.filter().unwrap()).unwrap();
        let mut b = FrameBatch::new(1);
        b.push(&[7; 60]);
        let _ = sw.forward(0, 0, &b, &mut FdbCache::default());
        let mut out = Vec::new();
        let stopping = AtomicBool::new(true);
        let summary = write_capture(&session, &sp, &mut out, &stopping, |_| false).unwrap();
        assert_eq!(
            (summary.end, summary.written),
            (CaptureEnd::DaemonStopping, 1)
        );
        let blocks = blocks(&out);
        assert!(matches!(blocks.last(), Some(Block::InterfaceStatistics(_))));
    }

    /// A client whose every write makes the port send another frame (a
    /// port sending faster than the writer writes).
    struct Refilling {
        sw: Arc<Switch>,
        batch: FrameBatch,
        cache: FdbCache,
    }
    impl Write for Refilling {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _ = self.sw.forward(0, 0, &self.batch, &mut self.cache);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_buffer_that_never_empties_still_lets_the_capture_end() {
        let sw = switch();
        let sp = spec(None, MAX_SNAPLEN);
        let session = sw.capture("b", sp.filter().unwrap()).unwrap();
        let mut batch = FrameBatch::new(1);
        batch.push(&[1; 60]);
        let out = Refilling {
            sw: Arc::clone(&sw),
            batch,
            cache: FdbCache::default(),
        };
        let stopping = AtomicBool::new(true);
        let summary = write_capture(&session, &sp, out, &stopping, |_| false).unwrap();
        assert_eq!(summary.end, CaptureEnd::DaemonStopping);
    }

    #[test]
    fn a_spec_takes_its_defaults_from_a_bare_request() {
        let sp: CaptureSpec = serde_json::from_str(r#"{"port":"vm1"}"#).unwrap();
        assert_eq!(sp, spec(None, MAX_SNAPLEN).with_port("vm1"));
    }

    impl CaptureSpec {
        fn with_port(mut self, port: &str) -> Self {
            self.port = port.into();
            self
        }
    }
}
