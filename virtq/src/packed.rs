//! Home of the packed virtqueue (virtio 1.2, section 2.8; the packed-ring
//! issue): the device and driver sides of the single descriptor ring with
//! wrap counters, indirect descriptors, in-order service and event
//! suppression, under the same bounds checks as the split ring's
//! [`device`](crate::device) and [`driver`](crate::driver). Empty until
//! that issue.
