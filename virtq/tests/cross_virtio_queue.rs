//! Cross-check against rust-vmm's `virtio-queue`, an independent
//! implementation: its mock driver feeds our device, and our driver feeds
//! its device. Both must see the same chains and used entries.

use std::sync::Arc;
use vadapt_virtq::DeviceRing;

use vadapt_virtq::{
    Chain, DeviceQueue, DriverQueue, GuestMemory, QueueLayout, Region, RingFeatures, Seg,
};
use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use virtio_queue::{Queue, QueueT};
use vm_memory::{GuestAddress, GuestMemoryBackend as _, GuestMemoryMmap};

/// `virtio-queue`'s mock puts indirect tables here.
const INDIRECT_AREA: u64 = 0x3000_0000;

/// The same memory seen by both crates: 4 MiB at 0 and 64 KiB at the
/// mock's indirect-table area (so our table has two regions).
fn shared_memory() -> (Arc<GuestMemoryMmap>, GuestMemory) {
    let vmem = Arc::new(
        GuestMemoryMmap::<()>::from_ranges(&[
            (GuestAddress(0), 4 << 20),
            (GuestAddress(INDIRECT_AREA), 1 << 16),
        ])
        .unwrap(),
    );
    let region = |gpa: u64, size: u64| {
        let host = vmem.get_host_address(GuestAddress(gpa)).unwrap();
        Region {
            gpa,
            size,
            uva: host as u64,
            host,
        }
    };
    let regions = vec![region(0, 4 << 20), region(INDIRECT_AREA, 1 << 16)];
    // SAFETY: both regions are inside `vmem`'s mappings, which the table
    // keeps alive through the Arc.
    let mem = unsafe { GuestMemory::new(regions, vec![vmem.clone()]) }.unwrap();
    (vmem, mem)
}

fn raw(addr: u64, len: u32, flags: u16, next: u16) -> RawDescriptor {
    RawDescriptor::from(SplitDescriptor::new(addr, len, flags, next))
}

type Seen = (u16, Vec<(u64, u32, bool)>);

#[test]
fn mock_driver_chains_parse_identically() {
    let (vmem, mem) = shared_memory();
    let mut mock = MockSplitQueue::create(&*vmem, GuestAddress(0), 16);
    const NEXT: u16 = 1;
    const WRITE: u16 = 2;
    mock.add_desc_chains(
        &[
            raw(0x10_0000, 100, NEXT, 1),
            raw(0x10_1000, 200, NEXT, 2),
            raw(0x10_2000, 300, WRITE, 0),
            raw(0x10_3000, 1500, WRITE, 0),
            raw(0x10_4000, 64, 0, 0),
        ],
        0,
    )
    .unwrap();
    mock.add_indirect_chain(3).unwrap();

    // Their device.
    let mut vq: Queue = mock.create_queue().unwrap();
    let mut theirs: Vec<Seen> = Vec::new();
    while let Some(chain) = vq.pop_descriptor_chain(&*vmem) {
        let head = chain.head_index();
        theirs.push((
            head,
            chain
                .map(|d| (d.addr().0, d.len(), d.is_write_only()))
                .collect(),
        ));
    }
    assert_eq!(theirs.len(), 4);

    // Ours, on the same ring.
    let layout = QueueLayout {
        size: 16,
        desc: mock.desc_table_addr().0,
        avail: mock.avail_addr().0,
        used: mock.used_addr().0,
    };
    let f = RingFeatures {
        indirect: true,
        ..Default::default()
    };
    let mut dev = DeviceQueue::new(&mem, layout, false, f, 0).unwrap();
    let mut chain = Chain::with_capacity(16);
    let mut ours: Vec<Seen> = Vec::new();
    while let Some(head) = dev.pop(&mem, &mut chain).unwrap() {
        ours.push((
            head,
            chain
                .segments()
                .map(|s| (s.gpa, s.len, s.writable))
                .collect(),
        ));
        dev.push_used(head, chain.writable_len());
    }
    assert_eq!(ours, theirs);
    assert_eq!(dev.flush_used(), 4);

    // The mock reads back what our device published.
    assert_eq!(mock.used().idx().load(), 4);
    for (i, (head, segs)) in ours.iter().enumerate() {
        let e = mock.used().ring().ref_at(i).unwrap().load();
        let written: u32 = segs.iter().filter(|s| s.2).map(|s| s.1).sum();
        assert_eq!((e.id(), e.len()), (u32::from(*head), written));
    }
}

#[test]
fn our_driver_feeds_their_device() {
    let (vmem, mem) = shared_memory();
    let (layout, _) = QueueLayout::contiguous(16, 0x1000);
    let mut drv = DriverQueue::new(&mem, layout, RingFeatures::default()).unwrap();
    let bufs: Vec<Vec<Seg>> = (0..6u64)
        .map(|i| {
            (0..=i % 3)
                .map(|k| Seg {
                    gpa: 0x20_0000 + 0x1000 * (4 * i + k),
                    len: 10 * (i as u32 + 1) + k as u32,
                    writable: k == 2 || i % 2 == 1,
                })
                .collect()
        })
        .collect();
    let mut heads = Vec::new();
    for segs in &bufs {
        heads.push(drv.add(segs).unwrap());
    }
    drv.publish();

    let mut vq = Queue::new(16).unwrap();
    vq.set_size(16);
    vq.set_ready(true);
    vq.set_desc_table_address(Some(layout.desc as u32), Some((layout.desc >> 32) as u32));
    vq.set_avail_ring_address(Some(layout.avail as u32), Some((layout.avail >> 32) as u32));
    vq.set_used_ring_address(Some(layout.used as u32), Some((layout.used >> 32) as u32));
    assert!(vq.is_valid(&*vmem));
    let mut i = 0;
    while let Some(chain) = vq.pop_descriptor_chain(&*vmem) {
        let head = chain.head_index();
        assert_eq!(head, heads[i]);
        let got: Vec<Seg> = chain
            .map(|d| Seg {
                gpa: d.addr().0,
                len: d.len(),
                writable: d.is_write_only(),
            })
            .collect();
        assert_eq!(got, bufs[i]);
        vq.add_used(&*vmem, head, 1000 + i as u32).unwrap();
        i += 1;
    }
    assert_eq!(i, bufs.len());
    for (i, &h) in heads.iter().enumerate() {
        assert_eq!(drv.pop_used(), Some((h, 1000 + i as u32)));
    }
    assert_eq!(drv.pop_used(), None);
    assert_eq!(drv.num_free(), 16);
}
