//! Software offload cost: cutting one 64 KiB TCPv4 GSO frame as Linux sends
//! it (Ethernet + IPv4 + TCP with timestamps, 45 × 1448 payload bytes) into
//! 45 frames of 1514 bytes, each written into the same 2048-byte slot as the
//! transmit path writes into a batch slot; and completing the partial
//! checksum of one 1514-byte frame. Throughput is in bytes of the original
//! frame.
//!
//! Quick run: `cargo bench -p vadapt-dataplane --bench offload -- --warm-up-time 1 --measurement-time 3`

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use vadapt_dataplane::offload::{complete_partial_checksum, ChecksumAt, TcpGso, TcpSegmenter};

const MSS: usize = 1448;
const SEGMENTS: usize = 45;
/// Ethernet (14) + IPv4 (20) + TCP with timestamps (32).
const HDRS: usize = 66;

/// A TSO frame as a Linux guest hands it over (checksum fields as left).
fn tso4_frame(payload: usize) -> Vec<u8> {
    let mut f = vec![0u8; HDRS + payload];
    f[0..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((20 + 32 + payload) as u16).to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    let tcp = &mut f[34..66];
    tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&5201u16.to_be_bytes());
    tcp[12] = 8 << 4; // 32-byte header
    tcp[13] = 0x18; // PSH, ACK
    tcp[20..24].copy_from_slice(&[1, 1, 8, 10]);
    for (i, b) in f[HDRS..].iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    f
}

fn offload(c: &mut Criterion) {
    let frame = tso4_frame(SEGMENTS * MSS);
    let gso = TcpGso {
        ipv6: false,
        ecn: false,
        mss: MSS as u16,
    };
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
