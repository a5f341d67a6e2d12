//! Software offload cost: cutting one 64 KiB TCPv4 GSO frame as Linux sends
//! it (Ethernet + IPv4 + TCP with timestamps, 45 × 1448 payload bytes) into
//! 45 frames of 1514 bytes, each written into the same 2048-byte slot as the
//! transmit path writes into a batch slot; and completing the partial
//! checksum of one 1514-byte frame. Throughput is in bytes of the original
//! frame.
//!
//! Quick run: `cargo bench -p vadapt-wire --bench offload -- --warm-up-time 1 --measurement-time 3`

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use vadapt_wire::test_frames::{gso, tso_frame, LINUX_V4};
use vadapt_wire::{complete_partial_checksum, ChecksumAt, TcpSegmenter};

const MSS: usize = 1448;
const SEGMENTS: usize = 45;

/// A TSO frame as a Linux guest hands it over (checksum fields as left),
/// of `payload` bytes of payload.
fn tso4_frame(payload: usize) -> Vec<u8> {
    let data: Vec<u8> = (0..payload).map(|i| (i % 251) as u8).collect();
    tso_frame(LINUX_V4, &data)
}

fn offload(c: &mut Criterion) {
    let frame = tso4_frame(SEGMENTS * MSS);
    let gso = gso(LINUX_V4, MSS as u16);
    let mut slot = [0u8; 2048];
    let mut g = c.benchmark_group("offload");
    g.throughput(Throughput::Bytes(frame.len() as u64));
    g.bench_function("segment_64k_tso4_into_45", |b| {
        b.iter(|| {
            let s = TcpSegmenter::new(black_box(&frame), gso, 1518).unwrap();
            let mut n = 0;
            for i in 0..s.segments() {
                n += s.write_segment(i, &mut slot);
            }
            black_box(n)
        })
    });
    let mut small = tso4_frame(MSS);
    g.throughput(Throughput::Bytes(small.len() as u64));
    g.bench_function("complete_checksum_1514", |b| {
        b.iter(|| {
            complete_partial_checksum(
                black_box(&mut small),
                ChecksumAt {
                    start: 34,
                    offset: 16,
                },
            )
        })
    });
    g.finish();
}

criterion_group!(benches, offload);
criterion_main!(benches);
