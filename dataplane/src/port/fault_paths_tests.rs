//! The fault injector on a VM port's real rings, on every path a worker
//! runs: a thread of the port's own, the NQ pool, and stepped on the
//! caller's thread. Under every policy, with timers late, wake-ups
//! spurious, kicks lost and passes short, every frame the guest sends is
//! taken, and the ring's position handed back is where the guest is.

use super::port_queues::PortQueues;
use super::vm_port::VmPort;
use crate::config::VmPortConfig;
use crate::metrics::Dir;
use crate::queue::ring::test_utils::{frame, ring};
use crate::queue::ring::Pair;
use crate::worker::fault_injector::{FaultInjector, Faults};
use crate::worker::pool::NqWorkers;
use crate::worker::Runtime;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use vadapt_host::cpufreq::CpuFreq;
use vadapt_policy::{PolicyConfig, PolicyKind};
use vadapt_virtq::mock::{buf, readable};
use vadapt_virtq::RingFeatures;

/// Frames the guest sends per run.
const FRAMES: u64 = 600;

/// One run: the guest sends [`FRAMES`] frames on a transmit ring of 64,
/// kicking after each batch it publishes, until every one is used.
fn run(runtime: &Runtime, policy: PolicyConfig, seed: u64) {
    let port = VmPort::new(
        VmPortConfig::new("vm", "/nonexistent/vm.sock"),
        policy,
        64,
        None,
        Arc::new(CpuFreq::unavailable("test")),
        None,
    )
    .unwrap();
    let (tx, mut guest) = ring(64, RingFeatures::default());
    let kick = tx.kick.try_clone().unwrap();
    // A zeroed virtio-net header (10 bytes without VERSION_1) before
    // each frame.
    for i in 0..64u64 {
        let mut f = vec![0u8; 10];
        f.extend(frame(i as u8, 64));
        guest.mem.write(buf(i), &f).unwrap();
    }
    let pair = Pair {
        rx: None,
        tx: Some(tx),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let queues =
        PortQueues::new(Arc::clone(&port), guest.mem.clone(), vec![pair], 0, stop).unwrap();
    let io = FaultInjector::new(queues, Faults::ROUGH, seed);
    let mut served = runtime.serve(1, io, "vadapt-w-vm", None).unwrap();
    let (mut sent, mut used) = (0u64, 0u64);
    // A stall guard only: a run takes milliseconds.
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while used < FRAMES {
        assert!(
            std::time::Instant::now() < give_up,
            "{runtime:?} {}: stalled at {used} of {FRAMES}",
            policy.kind()
        );
        let mut added = false;
        while sent < FRAMES && guest.driver.num_free() > 0 {
            guest.driver.add(&[readable(buf(sent % 64), 74)]).unwrap();
            sent += 1;
            added = true;
        }
        if added {
            guest.driver.publish();
            (&kick).write_all(&1u64.to_ne_bytes()).unwrap();
        }
        while guest.driver.pop_used().is_some() {
            used += 1;
        }
        if !served.step(false) {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
    let bases = served.stop().expect("the worker did not die");
    let tx_base = bases.iter().find(|b| b.ring == 1).expect("the tx ring");
    assert_eq!(u64::from(tx_base.next_avail), FRAMES % 65536);
    let taken = port.stats.queues[0].packets[Dir::Tx as usize].load(Ordering::Relaxed);
    assert_eq!(taken, FRAMES, "{runtime:?} {}", policy.kind());
}

#[test]
fn every_path_serves_a_vm_ring_through_every_fault_without_stall_or_loss() {
    let pool = NqWorkers::new(&[0], false).unwrap();
    for runtime in [
        Runtime::Thread,
        Runtime::Pool(Arc::clone(&pool)),
        Runtime::Stepped,
    ] {
        for (i, kind) in PolicyKind::ALL.iter().enumerate() {
            run(&runtime, PolicyConfig::default_for(*kind), i as u64);
        }
    }
    pool.shutdown();
}
