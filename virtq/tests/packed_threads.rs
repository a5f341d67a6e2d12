//! Packed ring across two threads: a driver and a device running at once
//! over many laps, so that the flag protocol (Release fence then flags,
//! Acquire load of flags then the rest) is exercised for real.

use std::thread;
use vadapt_virtq::DeviceRing;

use vadapt_virtq::mock::{buf, readable, writable};
use vadapt_virtq::packed::PackedMockQueue;
use vadapt_virtq::RingFeatures;

#[test]
fn concurrent_driver_and_device_agree_on_every_buffer() {
    const N: u32 = 20_000;
    for f in [RingFeatures::default(), RingFeatures::all()] {
        let PackedMockQueue {
            mem,
            mut driver,
            mut device,
            mut chain,
            ..
        } = PackedMockQueue::new(37, f);
        let dev_mem = mem.clone();
        let dev = thread::spawn(move || {
            let mut served = 0u32;
            let mut word = [0u8; 4];
            while served < N {
                match device.pop(&dev_mem, &mut chain).expect("valid buffer") {
                    Some(id) => {
                        // The driver wrote the buffer's sequence number.
                        assert_eq!(chain.read_into(0, &mut word), 4);
                        let seq = u32::from_le_bytes(word);
                        assert_eq!(seq, served, "buffers in order");
                        let w = chain.write_from(0, &(seq ^ 0xa5a5).to_le_bytes());
                        device.push_used(id, w as u32 + seq % 7);
                        served += 1;
                        if served % 5 == 0 {
                            device.flush_used();
                        }
                    }
                    None => {
                        device.flush_used();
                        thread::yield_now();
                    }
                }
            }
            device.flush_used();
        });
        let mut sent = 0u32;
        let mut done = 0u32;
        let mut seq_of = [0u32; 37];
        while done < N {
            while sent < N && driver.num_free() >= 2 {
                let slot = u64::from(sent % 64);
                mem.write(buf(2 * slot), &sent.to_le_bytes()).unwrap();
                let id = driver
                    .add(&[readable(buf(2 * slot), 4), writable(buf(2 * slot + 1), 8)])
                    .unwrap();
                seq_of[usize::from(id)] = sent;
                sent += 1;
            }
            driver.publish();
            match driver.pop_used() {
                Some((id, len)) => {
                    let seq = seq_of[usize::from(id)];
                    assert_eq!(seq, done, "{f:?}: used in order");
                    assert_eq!(len, 4 + seq % 7);
                    let mut back = [0u8; 4];
                    mem.read(buf(2 * u64::from(seq % 64) + 1), &mut back)
                        .unwrap();
                    assert_eq!(u32::from_le_bytes(back), seq ^ 0xa5a5);
                    done += 1;
                }
                None => thread::yield_now(),
            }
        }
        dev.join().unwrap();
        assert_eq!(driver.num_free(), 37);
    }
}
