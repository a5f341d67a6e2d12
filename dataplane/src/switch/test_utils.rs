//! Test doubles for the modules whose unit tests deliver frames.

use super::egress::Egress;
use crate::frames::FrameBatch;
use std::sync::Mutex;

/// An [`Egress`] that keeps a copy of every frame delivered to it, in
/// delivery order.
#[derive(Debug, Default)]
pub(crate) struct Recorder(pub(crate) Mutex<Vec<Vec<u8>>>);

impl Egress for Recorder {
    fn deliver(&self, frames: &FrameBatch, which: &[u16], _flow: u16) {
        let mut v = self.0.lock().unwrap();
        for &i in which {
            v.push(frames.get(usize::from(i)).to_vec());
        }
    }
}

/// An [`Egress`] that counts the frames delivered to it and keeps none (a
/// long flood through a [`Recorder`] would measure the recorder).
#[derive(Debug, Default)]
pub(crate) struct Counter(pub(crate) std::sync::atomic::AtomicU64);

impl Egress for Counter {
    fn deliver(&self, _frames: &FrameBatch, which: &[u16], _flow: u16) {
        self.0
            .fetch_add(which.len() as u64, std::sync::atomic::Ordering::Relaxed);
    }
}
