//! The open-loop request/response load (memcached-like) of one queue:
//! Poisson arrivals at a piecewise-linear rate, the requests waiting for the
//! worker, and the responses being served.

use crate::scenario::{RrLoad, ServiceDist};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Request/response state of one queue.
#[derive(Debug)]
pub(super) struct RequestResponseQueue {
    /// The queue's own draws (arrivals, service times).
    pub(super) rng: SmallRng,
    /// When the next request arrives, ns; `u64::MAX` for never.
    pub(super) next_arrival: u64,
    /// Arrival times of the requests the worker has not moved yet, ns.
    pub(super) backlog: VecDeque<u64>,
    /// Responses being served or posted: (ready time, request arrival time), ns.
    pub(super) responses: BinaryHeap<Reverse<(u64, u64)>>,
    /// The highest arrival rate of the load on this queue, per s.
    max_rate: f64,
}

impl RequestResponseQueue {
    /// Queue number `queue_number` (over all VMs) of a VM with `queues`
    /// queues, its first arrival drawn.
    pub(super) fn new(load: &RrLoad, queues: u32, seed: u64, queue_number: u64) -> Self {
        let max_rate = load.rate_qps.iter().map(|p| p.1).fold(0.0, f64::max) / f64::from(queues);
        let mut rr = RequestResponseQueue {
            rng: SmallRng::seed_from_u64(
                seed ^ (0x9E37_79B9_7F4A_7C15u64.wrapping_mul(queue_number + 1)),
            ),
            next_arrival: 0,
            backlog: VecDeque::new(),
            responses: BinaryHeap::new(),
            max_rate,
        };
        rr.next_arrival = rr.arrival_after(load, f64::from(queues), 0);
        rr
    }

    /// The first arrival after `from`, ns, of this queue's share of `load`
    /// spread over `queues` queues; `u64::MAX` for never.
    fn arrival_after(&mut self, load: &RrLoad, queues: f64, from: u64) -> u64 {
        if self.max_rate <= 0.0 {
            return u64::MAX;
        }
        // Thinning of a non-homogeneous Poisson process, rate λ(t)/queues.
        let mut t = from as f64;
        loop {
            let u: f64 = self.rng.gen_range(f64::MIN_POSITIVE..1.0);
            t += -u.ln() / self.max_rate * 1e9;
            if t > 1e18 {
                return u64::MAX;
            }
            let rate = rate_at(&load.rate_qps, t / 1e9) / queues;
            if self.rng.gen::<f64>() * self.max_rate <= rate {
                return t as u64;
            }
        }
    }

    /// Move the requests that arrived by `now` into the backlog.
    pub(super) fn pull_arrivals(&mut self, load: &RrLoad, queues: f64, now: u64) {
        while self.next_arrival <= now {
            let a = self.next_arrival;
            self.backlog.push_back(a);
            self.next_arrival = self.arrival_after(load, queues, a);
        }
    }

    /// Move the requests that arrived by `now` into `ring`, which holds at
    /// most `cap`; returns how many found it full (dropped).
    pub(super) fn pull_arrivals_into(
        &mut self,
        load: &RrLoad,
        queues: f64,
        now: u64,
        ring: &mut VecDeque<u64>,
        cap: usize,
    ) -> u64 {
        let mut dropped = 0;
        while self.next_arrival <= now {
            let a = self.next_arrival;
            if ring.len() < cap {
                ring.push_back(a);
            } else {
                dropped += 1;
            }
            self.next_arrival = self.arrival_after(load, queues, a);
        }
        dropped
    }

    /// Responses ready by `now`.
    pub(super) fn ready_responses(&self, now: u64) -> u64 {
        self.responses.iter().filter(|r| r.0 .0 <= now).count() as u64
    }

    /// When the first response is ready, ns.
    pub(super) fn first_response_at(&self) -> Option<u64> {
        self.responses.peek().map(|r| r.0 .0)
    }
}

/// A service time of `load`, ns.
pub(super) fn sample_service(rng: &mut SmallRng, load: &RrLoad) -> f64 {
    let m = load.service_mean_ns;
    match load.service {
        ServiceDist::Const => m,
        ServiceDist::Exp => {
            let u: f64 = rng.gen_range(f64::MIN_POSITIVE..1.0);
            -u.ln() * m
        }
        ServiceDist::LogNormal { sigma } => {
            // Box-Muller; mu chosen so that the mean is m.
            let u1: f64 = rng.gen_range(f64::MIN_POSITIVE..1.0);
            let u2: f64 = rng.gen();
            let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            let mu = m.ln() - sigma * sigma / 2.0;
            (mu + sigma * z).exp()
        }
    }
}

/// The piecewise-linear rate of `points` (time s, rate) at `t_s`, constant
/// before the first point and after the last.
pub(super) fn rate_at(points: &[(f64, f64)], t_s: f64) -> f64 {
    match points.iter().position(|p| p.0 > t_s) {
        None => points.last().map_or(0.0, |p| p.1),
        Some(0) => points[0].1,
        Some(i) => {
            let (t0, q0) = points[i - 1];
            let (t1, q1) = points[i];
            q0 + (q1 - q0) * (t_s - t0) / (t1 - t0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn piecewise_rate() {
        let pts = [(0.0, 50.0), (10.0, 250.0), (20.0, 50.0)];
        assert_eq!(rate_at(&pts, 0.0), 50.0);
        assert_eq!(rate_at(&pts, 5.0), 150.0);
        assert_eq!(rate_at(&pts, 10.0), 250.0);
        assert_eq!(rate_at(&pts, 30.0), 50.0);
    }
}
