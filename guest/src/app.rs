//! A sending thread: what a netperf thread does on one vCPU, over the virtio-net driver of
//! [`crate::driver`].
//!
//! Each thread owns one queue pair (or shares one, round-robin, under a mutex, when the
//! backend offers fewer pairs than there are threads). There is no separate receive thread:
//! as on a guest vCPU, the thread that sends also takes the "interrupts" of its pair.
//!
//! * **The loads**, one file each: a one-way stream of raw frames or of TCP segments, closed
//!   loop or paced (`stream.rs`); a TCP stream whose writes cost CPU time (`tcp_writer.rs`);
//!   request/response (`request_response.rs`); and the echo responder that answers another
//!   guest's requests (`echo.rs`). What a thread sends and what it makes of what it receives
//!   is its endpoint (`endpoint.rs`).
//! * **Pacing.** A paced stream sends each frame at its time, sleeping through gaps of
//!   100 µs or more and spinning through shorter ones ([`Pacing::Exact`], as pktgen); or,
//!   under [`Pacing::Burst`], sleeps until 100 µs worth of frames (at most a burst of 64)
//!   are due and sends them together, so the vCPU idles between bursts instead of spinning
//!   at 100 % — which on a host core shared with another guest keeps that guest off the
//!   core for up to a scheduler tick.
//! * **Write cost.** In TCP stream each application write busy-waits the emulated cost of a
//!   `send()` on this thread ([`TcpSender::write_messages`]); in closed loop the thread then
//!   writes one message at a time and transmits after each write.
//! * **A vCPU to the host.** The thread registers its thread id in [`Vcpus`] while it runs
//!   (QMP `query-cpus-fast`), and blocks at the top of each send loop while the guest is
//!   paused (QMP `stop`), re-checking the end of the run every 10 ms. A reply already on its
//!   way is still waited for; nothing new is sent until `cont`.
//!
//! [`Pacing::Exact`]: crate::load::Pacing::Exact
//! [`Pacing::Burst`]: crate::load::Pacing::Burst
//! [`TcpSender::write_messages`]: crate::tcp_stream::TcpSender::write_messages
//! [`Vcpus`]: vadapt_qemu::server::vcpus::Vcpus

mod echo;
mod endpoint;
mod request_response;
mod stream;
mod tcp_writer;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::thread_cpu_ns;
use crate::config::Mode;
use crate::driver::queue::QueuePair;
use crate::driver::Driver;
use crate::load::{Load, Pacer};
use crate::metrics::LatencyHistogram;
use crate::shared::Shared;
use crate::tcp_stream::TcpSender;
use endpoint::Endpoint;

/// Packets sent per lock hold / interrupt check in closed loop.
const BURST: u32 = 64;
/// Longest single sleep while waiting for a reply or the pacer (ns), so that stop requests
/// and deadlines are noticed.
const MAX_SLEEP_NS: u64 = 10_000_000;
/// Longest block at a pause point before the thread checks the stop conditions (ns).
const PAUSE_SLICE: Duration = Duration::from_millis(10);

/// What a thread hands back when it ends.
#[derive(Debug)]
pub(crate) struct WorkerResult {
    pub thread: u32,
    pub queue_pair: u16,
    pub hist: LatencyHistogram,
    /// End of the sending phase (ns on the shared clock).
    pub end_ns: u64,
    /// CPU time the thread used in the sending phase (ns).
    pub cpu_ns: u64,
    pub error: Option<String>,
}

/// One sending thread: its load, its endpoint and its driver.
#[derive(Debug)]
pub(crate) struct Worker {
    id: u32,
    shared: Arc<Shared>,
    driver: Driver,
    endpoint: Endpoint,
    /// Other threads use the same queue pair.
    shared_pair: bool,
}

impl Worker {
    /// Thread `id` of a guest, on `pair`.
    pub(crate) fn new(id: u32, pair: Arc<Mutex<QueuePair>>, shared: Arc<Shared>) -> Worker {
        Worker {
            id,
            driver: Driver::new(id, pair, Arc::clone(&shared)),
            endpoint: Endpoint::new(id, Arc::clone(&shared)),
            shared_pair: shared.threads > u32::from(shared.pairs),
            shared,
        }
    }

    /// Runs the thread's load until the end of the run, then drains its TX queue (unless
    /// the backend went away).
    pub(crate) fn run(mut self) -> WorkerResult {
        // This thread plays vCPU `id`: make it visible to `query-cpus-fast`.
        self.shared
            .vcpus
            .register(self.id, vadapt_host::cputime::current_tid());
        let cpu_start = thread_cpu_ns();
        let tcp_writes_cost = self.endpoint.tcp().is_some_and(TcpSender::writes_cost);
        match (self.shared.mode, self.shared.load) {
            (Mode::TcpStream, Load::ClosedLoop) if tcp_writes_cost => self.tcp_writer(),
            (Mode::Stream | Mode::TcpStream, Load::ClosedLoop) => self.stream(None),
            (Mode::Stream | Mode::TcpStream, Load::Rate { pps }) => {
                self.stream(Some(self.pacer(pps, 1024)))
            }
            (Mode::RequestResponse, Load::ClosedLoop) => self.request_response(None),
            (Mode::Echo, _) => self.respond(),
            (Mode::RequestResponse, Load::Rate { pps }) => {
                let p = self.pacer(pps, 1);
                self.request_response(Some(p))
            }
        }
        let end_ns = self.shared.clock.now_ns().min(self.shared.deadline_ns);
        let cpu_ns = thread_cpu_ns().saturating_sub(cpu_start);
        if !self.shared.abort.load(Ordering::Relaxed) {
            self.driver.drain();
        }
        self.shared.vcpus.unregister(self.id);
        WorkerResult {
            thread: self.id,
            queue_pair: self.driver.pair_index(),
            hist: self.endpoint.into_histogram(),
            end_ns,
            cpu_ns,
            error: self.driver.error,
        }
    }

    /// The vCPU's pause point (QMP `stop`, or this vCPU offline through the guest agent):
    /// blocks while held, for at most one slice. Returns whether it is still held; the
    /// caller re-checks its stop conditions.
    fn paused(&self) -> bool {
        self.shared.vcpus.wait_while_held(self.id, PAUSE_SLICE)
    }

    /// This thread's share of a guest-wide rate of `pps`.
    fn pacer(&self, pps: f64, max_backlog: u64) -> Pacer {
        let per_thread = pps / f64::from(self.shared.threads);
        Pacer::new(per_thread, self.shared.clock.now_ns(), max_backlog)
    }

    /// TCP stream: the application writes `n` messages, paying the write cost; counted.
    fn write_messages(&mut self, n: u64) {
        let Some(tcp) = self.endpoint.tcp_mut() else {
            return;
        };
        let ns = tcp.write_messages(n);
        let c = &self.shared.counters.threads[self.id as usize];
        c.written_messages.add(n);
        c.write_ns.add(ns);
    }
}
