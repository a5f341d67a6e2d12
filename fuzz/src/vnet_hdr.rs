//! A guest's virtio-net header and the frame behind it into the offload
//! code a transmit path runs (`vadapt_wire`'s header check, checksum and
//! segmenter, and `vadapt_dataplane::offload`): the header is checked
//! against the frame, then a partial checksum is completed or the
//! TCP segment is cut into segments, as the data plane does before handing
//! a frame to an egress that cannot take the offload.
//!
//! Input: the header's 10 bytes (`struct virtio_net_hdr`, little-endian),
//! one mode byte, then the frame. Mode bit 0 picks the segmenter's frame
//! limit (a 1518-byte Ethernet frame or a 9018-byte jumbo one, a port's
//! MTU plus 18); bit 1 also sends the frame down the ingress path
//! (`offload::push_frame`, with that limit as the source's MTU, which
//! keeps the offload with the frame in a small `FrameBatch`, flushed as it
//! fills) and out through an egress that cuts it (`offload::Cutter`): the
//! frames that come out must be what the parts above make of the same
//! frame, and the header kept for a receiver that takes the frame whole
//! must say what the guest's did. Bit 2 also hands the frame's bytes to
//! the `VIRTIO_NET_CTRL_GUEST_OFFLOADS` command decoder as class, command
//! and data. Bit 3 hands them to the whole control-queue decoder
//! (`queue::ctrl_command`, every feature negotiated, 4 pairs): a refusal
//! must change nothing, and an accepted RSS config must be within the
//! advertised limits and steer the frame itself to one of the 4 queues.
//!
//! Checked beyond "no panic, nothing read or written out of bounds": a
//! header that passes its check has its checksum field inside the frame; a
//! frame the segmenter accepts gives segments that each fit the limit,
//! pass `vadapt_wire::test_frames::verify_segment` (they parse, with
//! `etherparse`, not our parser, as IP/TCP with a verifying TCP checksum
//! and IPv4 header checksum, and carry at most an MSS of payload), and
//! whose payloads put together are the original's.

use vadapt_dataplane::frames::FrameBatch;
use vadapt_dataplane::net::{HostOffloads, MAX_GSO_FRAME};
use vadapt_dataplane::offload::{push_frame, tx_offload, Cutter, Pushed};
use vadapt_dataplane::queue::guest_offloads::GuestOffloadState;
use vadapt_wire::test_frames::verify_segment;
use vadapt_wire::{complete_partial_checksum, Offload, TcpSegmenter, VnetHdr};

/// Frame limits the mode byte picks from: Ethernet with a VLAN tag, jumbo.
pub const FRAME_LIMITS: [usize; 2] = [1518, 9018];

/// Run one input.
pub fn run(data: &[u8]) {
    let Some(hdr) = VnetHdr::read(data) else {
        return;
    };
    let Some((&mode, frame)) = data[VnetHdr::LEN..].split_first() else {
        return;
    };
    let max_frame = FRAME_LIMITS[usize::from(mode & 1)];
    if mode & 2 != 0 {
        through_batch(&hdr, frame, max_frame);
    }
    if mode & 4 != 0 {
        guest_offloads_command(frame);
    }
    if mode & 8 != 0 {
        control_command(frame);
    }
    let Ok(offload) = hdr.check(frame.len()) else {
        return;
    };
    match offload {
        Offload::None => {}
        Offload::Checksum(at) => {
            let mut f = frame.to_vec();
            assert!(
                complete_partial_checksum(&mut f, at),
                "a checked header's checksum field lies inside the frame"
            );
        }
        Offload::Tcp(gso, _) => {
            let Ok(seg) = TcpSegmenter::new(frame, gso, max_frame) else {
                return;
            };
            check_segments(frame, &seg, usize::from(gso.mss), max_frame);
        }
    }
}

/// The TAP reader's path for a source whose frames are at most
/// `max_frame` bytes (its MTU), checked against the parts it is made of.
fn through_batch(hdr: &VnetHdr, frame: &[u8], max_frame: usize) {
    let all = HostOffloads::ALL;
    let mut batch = FrameBatch::new(8);
    let mut got: Vec<Vec<u8>> = Vec::new();
    let r = push_frame(hdr, frame, all, max_frame, &mut batch, |b| {
        got.extend(out_of_egress(b));
        b.clear();
    });
    got.extend(out_of_egress(&batch));
    let offload = if hdr.is_plain() {
        Ok(Offload::None)
    } else {
        tx_offload(hdr, frame.len(), all)
    };
    let want: Option<Vec<Vec<u8>>> = match offload {
        Err(_) => None,
        Ok(Offload::Tcp(..)) if frame.len() > MAX_GSO_FRAME => None,
        Ok(Offload::Tcp(gso, _)) => TcpSegmenter::new(frame, gso, max_frame).ok().map(|s| {
            (0..s.segments())
                .map(|i| {
                    let mut out = vec![0u8; s.segment_len(i)];
                    s.write_segment(i, &mut out);
                    out
                })
                .collect()
        }),
        Ok(_) if frame.len() > max_frame => None,
        Ok(o) => {
            let mut f = frame.to_vec();
            if let Offload::Checksum(at) = o {
                complete_partial_checksum(&mut f, at);
            }
            Some(vec![f])
        }
    };
    match (r, want) {
        (Pushed::Frames { packets, bytes }, Some(want)) => {
            assert_eq!(got, want, "push_frame's frames, cut at the egress");
            assert_eq!((packets, bytes), (1, frame.len() as u64), "kept whole");
        }
        (Pushed::Oversize | Pushed::OverMtu(_) | Pushed::Refused(_), None) => {
            assert!(got.is_empty())
        }
        (r, want) => panic!("push_frame said {r:?}, the parts say {want:?}"),
    }
}

/// The frames of `b` as an egress without offloads sends them: marked
/// frames cut; and each kept header, checked again, asks what it did.
fn out_of_egress(b: &FrameBatch) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..b.len() {
        let f = b.get(i);
        let Some(k) = b.offloaded(i) else {
            out.push(f.to_vec());
            continue;
        };
        assert_eq!(k.hdr.check(f.len()), Ok(k.offload), "the kept header");
        let c = Cutter::new(f, k.offload).expect("a kept frame cuts");
        let mut buf = Vec::new();
        for s in 0..c.count() {
            let n = c.write_vec(s, &mut buf);
            assert_eq!(n, c.len(s));
            out.push(buf[..n].to_vec());
        }
    }
    out
}

/// `VIRTIO_NET_CTRL_GUEST_OFFLOADS_SET` from guest bytes: acked only for
/// class 5, command 0 and a le64 of negotiated guest offloads.
fn guest_offloads_command(bytes: &[u8]) {
    let [class, command, data @ ..] = bytes else {
        return;
    };
    let state = GuestOffloadState::default();
    state.negotiate(u64::MAX);
    let (ack, why) = state.ctrl_command(*class, *command, data);
    let valid = *class == 5
        && *command == 0
        && data.len() == 8
        && u64::from_le_bytes(data.try_into().unwrap()) & !0x382 == 0;
    assert_eq!(ack == 0, valid, "{why:?}");
}

/// Any control command from guest bytes, answered as the control queue
/// answers it.
fn control_command(bytes: &[u8]) {
    use vadapt_dataplane::queue::ctrl_command::CtrlTarget;
    use vadapt_dataplane::queue::rss::{RssState, MAX_KEY_SIZE, MAX_TABLE_LEN};
    let [class, command, data @ ..] = bytes else {
        return;
    };
    let offloads = GuestOffloadState::default();
    offloads.negotiate(u64::MAX);
    let rss = RssState::default();
    let t = CtrlTarget {
        features: u64::MAX,
        pairs: 4,
        offloads: &offloads,
        rss: &rss,
    };
    let before = offloads.accepted();
    let (status, r) = t.status(*class, *command, data);
    assert_eq!(status == 0, r.is_ok());
    if r.is_err() {
        assert_eq!(
            offloads.accepted(),
            before,
            "a refusal changed the offloads"
        );
        assert!(rss.get().is_none(), "a refusal set an RSS config");
    }
    if let Some(c) = rss.get() {
        assert!(c.table.len().is_power_of_two() && c.table.len() <= usize::from(MAX_TABLE_LEN));
        assert!(c.key.len() <= usize::from(MAX_KEY_SIZE));
        assert!(c.queue_of(bytes) < 4);
    }
}

fn check_segments(frame: &[u8], seg: &TcpSegmenter<'_>, mss: usize, max_frame: usize) {
    let mut out = vec![0u8; max_frame];
    let mut payload = Vec::with_capacity(frame.len());
    for i in 0..seg.segments() {
        let len = seg.write_segment(i, &mut out);
        assert_eq!(len, seg.segment_len(i));
        assert!(len <= max_frame, "segment {i}: {len} > {max_frame}");
        let (_, tcp) =
            verify_segment(&out[..len], mss).unwrap_or_else(|e| panic!("segment {i}: {e}"));
        payload.extend_from_slice(tcp.payload());
    }
    let start = seg.header_len();
    assert_eq!(
        payload[..],
        frame[start..start + payload.len()],
        "the segments' payloads put together are the original's"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use vadapt_wire::vnet_hdr::MAX_SEGMENTS;

    fn seed(name: &str) -> Vec<u8> {
        let p = format!("{}/seeds/vnet_hdr/{name}", env!("CARGO_MANIFEST_DIR"));
        // Reading opens a descriptor: not while another test counts them.
        let _one = crate::tests::serial();
        std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    /// The seeds reach past the checks: each is accepted and segments (or
    /// has its checksum completed) as a Linux guest's frame would.
    #[test]
    fn seeds_reach_segmentation() {
        for (name, want_segments) in [
            ("tso4", 3),
            ("tso6-vlan-ecn", 4),
            ("csum4", 0),
            ("tso4-reserved-flag", 3),
            ("tso4-tap", 3),
        ] {
            let s = seed(name);
            let hdr = VnetHdr::read(&s).unwrap();
            let frame = &s[VnetHdr::LEN + 1..];
            match hdr.check(frame.len()).unwrap() {
                Offload::Tcp(gso, Some(_)) => {
                    let seg = TcpSegmenter::new(frame, gso, FRAME_LIMITS[0]).unwrap();
                    assert_eq!(seg.segments(), want_segments, "{name}");
                    assert!(seg.segments() <= MAX_SEGMENTS);
                }
                Offload::Checksum(_) => assert_eq!(want_segments, 0, "{name}"),
                other => panic!("{name}: {other:?}"),
            }
            run(&s);
        }
    }

    /// The first finding (a harness bug, not the data plane's): IPv4's
    /// reserved flag bit set, which the oracle's `to_header()` dropped.
    #[test]
    fn the_reserved_ipv4_flag_is_carried_and_checksummed() {
        let s = seed("tso4-reserved-flag");
        assert_eq!(s[VnetHdr::LEN + 1 + 14 + 6] & 0x80, 0x80);
        run(&s);
    }
}
