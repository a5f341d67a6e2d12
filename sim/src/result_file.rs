//! A run on disk: [`SimResult`] as the one result schema of `vadapt-results`
//! (a `ResultFile` of `kind` `sim`), which `result.json` holds and the lab's
//! `vadapt_lab.results.load_results` reads like a benchmark's file.
//!
//! Every row has `backend` `sim`, `frame` 0 and `run` the seed (`u32::MAX`
//! when the seed does not fit; `params.seed` has it). Its `policy` is the one
//! in force when known, else the scenario's first.
//!
//! | `table` | a row per | `sender` | `policy` | `variant` |
//! |---|---|---|---|---|
//! | `samples` | time-series window | the VMs' workload kinds | first worker's at the window's end | scenario name |
//! | `periods` | scenario period | the VMs' workload kinds | first worker's at the period's end | period name |
//! | `workers` | queue worker | its VM's workload kind | its own at the end | VM name |
//!
//! Metrics, named with their unit:
//! * `samples`: `t_s` (window end, s), `gbps`, `gbps_vm<i>` (VM `i`, Gb/s),
//!   `host_cpu_pct`, `guest_cpu_pct` (% of one core), `kicks_per_s`,
//!   `calls_per_s`, `wakeups_per_s`, `passes_per_s`, `interval_us_w<i>`
//!   (worker `i`'s interval, µs), `round_w<i>` (its adaptation round), and
//!   where modelled `power_w` (W), `offered_qps`, `served_qps` (requests/s),
//!   `p50_us`, `p99_us` (µs);
//! * `periods`: `from_s`, `to_s` (s), means of `gbps`, `host_cpu_pct`,
//!   `guest_cpu_pct`, `kicks_per_s`, `calls_per_s`, `power_w`, and `p99_us`
//!   over the period;
//! * `workers`: `worker` (its index, as in `interval_us_w<i>`),
//!   `final_interval_us`, `settled_after_s`, `rounds`, `restarts`, and over
//!   the run `kicks`, `calls`, `wakeups`, `passes`, `packets` (counts) and
//!   `cpu_s` (s).
//!
//! Metadata: `bench` is the scenario's name; `params` hold `seed`,
//! `duration_s` (simulated, s), `events`, `energy_j` (J, power model only),
//! the NAPI-like receive path's totals (`[host.napi]` only: `napi_interrupts`,
//! `napi_polls`, `napi_deferrals`, `napi_dropped_ring`, `napi_dropped_socket`,
//! `napi_cpu_s`) and a sweep point's parameter value under the parameter's name; `notes`
//! hold the strings as `key: value` lines (`file`, `calibration_machine`,
//! `param`); `commands` the `vadapt sim` invocation of a single run. No wall
//! clock: equal runs give byte-identical files.

use crate::result::{PeriodSummary, Sample, SimResult, WorkerSummary};
use std::collections::BTreeMap;
use vadapt_results::{Kind, ResultFile, Row};

/// `backend` of every simulated row.
const BACKEND: &str = "sim";

impl SimResult {
    /// The run as a result file of kind `sim` (rows and metadata as the
    /// module documentation lists them).
    pub fn to_result_file(&self) -> ResultFile {
        let mut params = BTreeMap::new();
        params.insert("seed".to_string(), self.seed as f64);
        params.insert("duration_s".to_string(), self.duration_s);
        params.insert("events".to_string(), self.events as f64);
        if let Some(e) = self.energy_j {
            params.insert("energy_j".to_string(), e);
        }
        if let Some(n) = &self.napi {
            for (k, v) in n.params() {
                params.insert(k.to_string(), v);
            }
        }
        let mut notes = vec![
            format!("file: {}", self.file),
            format!("calibration_machine: {}", self.calibration_machine),
        ];
        if let Some((name, value)) = &self.param {
            notes.push(format!("param: {name}"));
            params.insert(name.clone(), *value);
        }
        // A sweep point's scenario was changed by the sweep: no single
        // command reproduces it.
        let commands = if self.param.is_none() && !self.file.is_empty() {
            vec![format!(
                "vadapt sim {} --seed {} --duration-s {}",
                self.file, self.seed, self.duration_s
            )]
        } else {
            Vec::new()
        };
        let rows = self
            .samples
            .iter()
            .map(|s| self.sample_row(s))
            .chain(self.periods.iter().map(|p| self.period_row(p)))
            .chain(
                self.workers
                    .iter()
                    .enumerate()
                    .map(|(i, w)| self.worker_row(i, w)),
            )
            .collect();
        ResultFile {
            kind: Kind::Sim,
            bench: self.scenario.clone(),
            title: format!("simulation of {}", self.scenario),
            status: "ok".to_string(),
            error: None,
            notes,
            commands,
            started: String::new(),
            seconds: 0.0,
            quick: false,
            runs: 1,
            run_seconds: self.duration_s,
            params,
            rows,
        }
    }

    /// A row of `table` with the labels every simulated row shares.
    fn labelled(&self, table: &str, sender: &str, policy: &str, variant: &str) -> Row {
        let policy = if policy.is_empty() {
            &self.first_policy
        } else {
            policy
        };
        let run = u32::try_from(self.seed).unwrap_or(u32::MAX);
        Row::new(table, sender, BACKEND, policy, variant).at(0, run)
    }

    /// The first worker's policy at `t_s`: that of the last window ending by
    /// then (empty when there is none).
    fn policy_at(&self, t_s: f64) -> &str {
        self.samples
            .iter()
            .take_while(|s| s.t_s <= t_s + 1e-9)
            .last()
            .map_or("", |s| s.policy.as_str())
    }

    fn sample_row(&self, s: &Sample) -> Row {
        let mut r = self.labelled("samples", &self.workload, &s.policy, &self.scenario);
        r.set("t_s", s.t_s)
            .set("gbps", s.gbps)
            .set("host_cpu_pct", s.host_cpu_pct)
            .set("guest_cpu_pct", s.guest_cpu_pct)
            .set("kicks_per_s", s.kicks_per_s)
            .set("calls_per_s", s.calls_per_s)
            .set("wakeups_per_s", s.wakeups_per_s)
            .set("passes_per_s", s.passes_per_s)
            .set_some("power_w", s.power_w)
            .set_some("offered_qps", s.offered_qps)
            .set_some("served_qps", s.served_qps)
            .set_some("p50_us", s.p50_us)
            .set_some("p99_us", s.p99_us);
        for (v, g) in s.vm_gbps.iter().enumerate() {
            r.set(&format!("gbps_vm{v}"), *g);
        }
        for (w, iv) in s.intervals_us.iter().enumerate() {
            r.set_some(&format!("interval_us_w{w}"), *iv);
        }
        for (w, round) in s.rounds.iter().enumerate() {
            r.set_some(&format!("round_w{w}"), round.map(f64::from));
        }
        r
    }

    fn period_row(&self, p: &PeriodSummary) -> Row {
        let policy = self.policy_at(p.to_s);
        let mut r = self.labelled("periods", &self.workload, policy, &p.name);
        r.set("from_s", p.from_s)
            .set("to_s", p.to_s)
            .set("gbps", p.gbps)
            .set("host_cpu_pct", p.host_cpu_pct)
            .set("guest_cpu_pct", p.guest_cpu_pct)
            .set("kicks_per_s", p.kicks_per_s)
            .set("calls_per_s", p.calls_per_s)
            .set_some("power_w", p.power_w)
            .set_some("p95_us", p.p95_us)
            .set_some("p99_us", p.p99_us)
            .set_some("served_qps", p.served_qps);
        r
    }

    fn worker_row(&self, i: usize, w: &WorkerSummary) -> Row {
        let mut r = self.labelled("workers", &w.workload, &w.policy, &w.vm);
        r.set("worker", i as f64)
            .set_some("final_interval_us", w.final_interval_us)
            .set_some("settled_after_s", w.settled_after_s)
            .set_some("rounds", w.rounds.map(f64::from))
            .set("restarts", f64::from(w.restarts))
            .set("kicks", w.kicks as f64)
            .set("calls", w.calls as f64)
            .set("wakeups", w.wakeups as f64)
            .set("passes", w.passes as f64)
            .set("packets", w.packets as f64)
            .set("cpu_s", w.cpu_s);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_s: f64, policy: &str) -> Sample {
        Sample {
            t_s,
            policy: policy.into(),
            gbps: 3.0,
            vm_gbps: vec![1.0, 2.0],
            host_cpu_pct: 50.0,
            guest_cpu_pct: 80.0,
            kicks_per_s: 1000.0,
            calls_per_s: 900.0,
            wakeups_per_s: 800.0,
            passes_per_s: 700.0,
            intervals_us: vec![Some(100.0), None],
            rounds: vec![Some(2), None],
            power_w: None,
            offered_qps: None,
            served_qps: None,
            p50_us: None,
            p99_us: None,
        }
    }

    fn result() -> SimResult {
        SimResult {
            scenario: "two-vms".into(),
            file: "sim/scenarios/two.toml".into(),
            seed: 7,
            param: None,
            calibration_machine: "EPYC".into(),
            first_policy: "interrupt".into(),
            workload: "stream+rr".into(),
            duration_s: 2.0,
            events: 1234,
            energy_j: None,
            samples: vec![sample(1.0, ""), sample(2.0, "netap")],
            periods: vec![PeriodSummary {
                name: "adapted".into(),
                from_s: 1.0,
                to_s: 2.0,
                gbps: 3.0,
                host_cpu_pct: 50.0,
                guest_cpu_pct: 80.0,
                kicks_per_s: 1000.0,
                calls_per_s: 900.0,
                power_w: None,
                p95_us: None,
                p99_us: Some(40.0),
                served_qps: None,
            }],
            core_events: Default::default(),
            napi: None,
            workers: vec![WorkerSummary {
                vm: "vm1".into(),
                workload: "rr".into(),
                policy: "netap".into(),
                final_interval_us: Some(100.0),
                settled_after_s: None,
                rounds: Some(2),
                restarts: 0,
                kicks: 10,
                calls: 9,
                wakeups: 8,
                passes: 7,
                packets: 6,
                cpu_s: 0.5,
            }],
        }
    }

    #[test]
    fn a_run_becomes_sample_period_and_worker_rows() {
        let f = result().to_result_file();
        assert_eq!(f.kind, Kind::Sim);
        assert_eq!(f.bench, "two-vms");
        let samples: Vec<&Row> = f.table("samples").collect();
        assert_eq!(samples.len(), 2);
        // No policy known at the first window: the scenario's first.
        assert_eq!(samples[0].policy, "interrupt");
        assert_eq!(samples[1].policy, "netap");
        let s = samples[1];
        assert_eq!(
            (s.sender.as_str(), s.backend.as_str(), s.variant.as_str()),
            ("stream+rr", "sim", "two-vms")
        );
        assert_eq!((s.frame, s.run), (0, 7));
        assert_eq!(s.m["t_s"], 2.0);
        assert_eq!(s.m["gbps_vm1"], 2.0);
        assert_eq!(s.m["interval_us_w0"], 100.0);
        assert_eq!(s.m["round_w0"], 2.0);
        // Absent values are absent, not zero.
        assert!(!s.m.contains_key("interval_us_w1") && !s.m.contains_key("p99_us"));
        let p: Vec<&Row> = f.table("periods").collect();
        assert_eq!(
            (p[0].variant.as_str(), p[0].policy.as_str()),
            ("adapted", "netap")
        );
        assert_eq!(p[0].m["p99_us"], 40.0);
        let w: Vec<&Row> = f.table("workers").collect();
        assert_eq!((w[0].variant.as_str(), w[0].sender.as_str()), ("vm1", "rr"));
        assert_eq!((w[0].m["worker"], w[0].m["packets"]), (0.0, 6.0));
    }

    #[test]
    fn scalar_metadata_goes_to_params_notes_and_the_command() {
        let f = result().to_result_file();
        assert_eq!(f.params["seed"], 7.0);
        assert_eq!(f.params["events"], 1234.0);
        assert!(!f.params.contains_key("energy_j"));
        assert_eq!(f.run_seconds, 2.0);
        assert!(f
            .notes
            .contains(&"file: sim/scenarios/two.toml".to_string()));
        assert!(f.notes.contains(&"calibration_machine: EPYC".to_string()));
        assert_eq!(
            f.commands,
            ["vadapt sim sim/scenarios/two.toml --seed 7 --duration-s 2"]
        );
        let point = SimResult {
            param: Some(("interval".into(), 600.0)),
            energy_j: Some(5.0),
            ..result()
        }
        .to_result_file();
        assert_eq!(point.params["interval"], 600.0);
        assert_eq!(point.params["energy_j"], 5.0);
        assert!(point.notes.contains(&"param: interval".to_string()));
        assert!(point.commands.is_empty());
    }
}
