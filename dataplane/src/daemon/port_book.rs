//! The ports a daemon runs, and changing them while it runs: one added
//! (`vadapt add-port`), one removed (`vadapt del-port`), or the difference
//! to a configuration read again (`vadapt reload`, `SIGHUP`). A port that
//! is not part of a change is not touched: its worker keeps running and its
//! frontend stays connected.
//!
//! Ports added at run time are kept in the state file ([`PortStore`]) when
//! the daemon has one: written before the request is answered, removed by
//! `del-port`, restored at start after the config file's ports (a port of
//! the file's wins a name clash). A reload compares the file with the
//! file's ports only: it leaves the run-time ports and the state file
//! alone, except a run-time port whose name the file now gives to a port
//! of its own, which the file's port replaces (the state file keeps it).

use super::error::DaemonError;
use super::port_state::PortStore;
use super::ports::{PortMaker, RunningHost, RunningVm};
use crate::config::{DaemonConfig, PortLimits, PortSpec, VmOrHost};
use crate::control::ReloadReport;
use crate::port::{Roster, RunningPort};
use std::collections::BTreeSet;
use std::sync::Arc;
use vadapt_policy::PolicyConfig;

/// The ports that run, and the configuration they are now.
///
/// Every port that runs is in the roster, the one list of running ports
/// that the rest of the daemon reads (the counters' registry included),
/// and the book is its only writer. The book keeps beside it only what
/// nobody else may touch, for each port: the threads it stops and joins
/// when the port goes, its socket file, and its configuration.
pub(super) struct PortBook {
    maker: PortMaker,
    roster: Arc<Roster>,
    /// The VM ports' threads and socket files, by port.
    vms: Vec<RunningVm>,
    /// The other ports' threads, by port.
    hosts: Vec<RunningHost>,
    /// The configuration as the ports are now (start-up's, with every
    /// change since): what a port to add is checked against.
    config: DaemonConfig,
    /// VM ports made so far (the next one's turn in `--cpus`).
    made: usize,
    /// The daemon is stopping: no port is added any more.
    closed: bool,
    /// The state file; `None`: run-time ports are not kept.
    store: Option<PortStore>,
    /// The running ports that were added at run time or restored from the
    /// state file (not the config file's): a reload leaves them alone.
    run_time: BTreeSet<String>,
}

impl PortBook {
    /// No ports yet; `config` is the daemon's (its ports are added with
    /// [`PortBook::add`]).
    pub(super) fn new(maker: PortMaker, roster: Arc<Roster>, config: &DaemonConfig) -> Self {
        let config = config.without_ports();
        PortBook {
            maker,
            roster,
            vms: Vec::new(),
            hosts: Vec::new(),
            config,
            made: 0,
            closed: false,
            store: None,
            run_time: BTreeSet::new(),
        }
    }

    /// Keep the ports added at run time in `store` from now on.
    pub(super) fn keep_in(&mut self, store: PortStore) {
        self.store = Some(store);
    }

    /// Restore `port`, read from the state file at start: added as a
    /// run-time port, the file not written.
    pub(super) fn restore(&mut self, port: PortSpec) -> Result<(), DaemonError> {
        let name = port.name().to_owned();
        self.add(port)?;
        self.run_time.insert(name);
        Ok(())
    }

    /// Add `port` at run time (`vadapt add-port`): made, then written to the
    /// state file before this returns; if the file cannot be written the
    /// port is removed again and the error says why (answered `Ok` means
    /// kept).
    pub(super) fn add_at_run_time(&mut self, port: PortSpec) -> Result<(), DaemonError> {
        let (name, kind) = (port.name().to_owned(), port.kind());
        let kept = port.clone();
        self.add(port).map_err(|e| DaemonError::AddPort {
            kind,
            port: name.clone(),
            source: Box::new(e),
        })?;
        if let Some(store) = &mut self.store {
            if let Err(source) = store.put(kept) {
                let _ = self.remove(&name);
                return Err(DaemonError::KeepPort { port: name, source });
            }
        }
        self.run_time.insert(name);
        Ok(())
    }

    /// Remove the port named `name` at run time (`vadapt del-port`): out of
    /// the state file first (if the file cannot be written nothing is
    /// changed), then out of the daemon. A port in the state file that does
    /// not run (it could not be restored, or a port of the config file's
    /// has its name) is removed from the file alone.
    pub(super) fn remove_at_run_time(&mut self, name: &str) -> Result<(), DaemonError> {
        let runs = self.config.ports().iter().any(|p| p.name() == name);
        let in_file = match &mut self.store {
            Some(store) if runs || store.get(name).is_some() => {
                store
                    .remove(name)
                    .map_err(|source| DaemonError::ForgetPort {
                        port: name.to_owned(),
                        source,
                    })?
            }
            _ => false,
        };
        if runs || !in_file {
            self.remove(name)?;
        }
        Ok(())
    }

    /// Change the rate limits of the port named `name` at run time (`vadapt
    /// set-limits`): as [`PortBook::set_limits`], and for a run-time port
    /// written to the state file first.
    pub(super) fn set_limits_at_run_time(
        &mut self,
        name: &str,
        limits: PortLimits,
    ) -> Result<(), DaemonError> {
        if let (true, Some(store)) = (self.run_time.contains(name), &mut self.store) {
            let spec = self.config.ports().into_iter().find(|p| p.name() == name);
            if let Some(mut spec) = spec {
                let mtu = spec.mtu();
                if let Some(l) = spec.limits_mut() {
                    limits.check("", name, mtu)?;
                    *l = limits;
                    store.put(spec).map_err(|source| DaemonError::KeepLimits {
                        port: name.to_owned(),
                        source,
                    })?;
                }
            }
        }
        self.set_limits(name, limits)
    }

    /// Keep `policy`, just set on the running port `name`, as the policy of
    /// a port added at run time: in the daemon's configuration and in the
    /// state file, so that a restart brings the port back with it. A config
    /// file's port keeps the file's policy in both: a restart or a reload
    /// that changes the port goes back to it, as `vadapt set-policy` says.
    pub(super) fn keep_policy(
        &mut self,
        name: &str,
        policy: PolicyConfig,
    ) -> Result<(), DaemonError> {
        if !self.run_time.contains(name) {
            return Ok(());
        }
        let c = &mut self.config;
        let configured = (c.vm.iter_mut().find(|v| v.name == name)).map(|v| &mut v.policy);
        let configured = configured
            .or_else(|| (c.uplink.iter_mut().find(|u| u.name == name)).map(|u| &mut u.policy));
        let Some(configured) = configured else {
            return Ok(());
        };
        *configured = Some(policy);
        let spec = self.config.ports().into_iter().find(|p| p.name() == name);
        if let (Some(store), Some(spec)) = (&mut self.store, spec) {
            store.put(spec).map_err(|source| DaemonError::KeepPolicy {
                port: name.to_owned(),
                source,
            })?;
        }
        Ok(())
    }

    /// Add `port`, checked against the ports there are (names, sockets and
    /// MACs unique; its NetAP-ML model loaded if its policy needs one).
    pub(super) fn add(&mut self, port: PortSpec) -> Result<(), DaemonError> {
        if self.closed {
            return Err(DaemonError::Stopping);
        }
        let mut candidate = self.config.clone();
        candidate.add_port(port.clone());
        candidate.validate_ports_and_settings()?;
        match port.into_vm_or_host() {
            VmOrHost::Vm(vm) => {
                let model = candidate.netap_ml_model.as_deref();
                crate::netap_ml_model::prepare(model, vm.policy.iter())?;
                let running = self.maker.vm(self.made, &vm)?;
                self.made += 1;
                self.roster.add(RunningPort::vm(Arc::clone(&running.port)));
                self.vms.push(running);
            }
            VmOrHost::Host(spec) => {
                let host = self.maker.host(spec)?;
                self.roster.add(host.running());
                self.hosts.push(host);
            }
        }
        self.config = candidate;
        Ok(())
    }

    /// Remove the port named `name`, of any kind.
    pub(super) fn remove(&mut self, name: &str) -> Result<(), DaemonError> {
        if let Some(i) = self.vms.iter().position(|v| v.port.name() == name) {
            let vm = self.vms.remove(i);
            // Whatever follows the ports lets go of it first.
            self.roster.remove(name);
            self.maker.remove_vm(vm);
        } else if let Some(i) = self.hosts.iter().position(|h| h.spec.name() == name) {
            let host = self.hosts.remove(i);
            self.roster.remove(name);
            self.maker.remove_host(host);
        } else {
            return Err(self.no_port(name));
        }
        self.config.remove_port(name);
        self.run_time.remove(name);
        Ok(())
    }

    /// Change the rate limits of the port named `name` (a VM, TAP or
    /// uplink port), checked against its configuration; the configuration
    /// as the ports are now follows, so that a reload compares the file
    /// with them. The port's senders apply them after their current pass.
    pub(super) fn set_limits(&mut self, name: &str, limits: PortLimits) -> Result<(), DaemonError> {
        let ports = self.config.ports();
        let Some(spec) = ports.iter().find(|p| p.name() == name) else {
            return Err(self.no_port(name));
        };
        let slot = self
            .vms
            .iter()
            .find(|v| v.port.name() == name)
            .map(|v| &v.port.limits)
            .or_else(|| {
                let host = self.hosts.iter().find(|h| h.spec.name() == name);
                host.and_then(|h| h.limits())
            });
        let (Some(slot), Some(_)) = (slot, spec.limits()) else {
            return Err(DaemonError::NoLimits {
                port: name.to_owned(),
                kind: spec.kind(),
            });
        };
        limits.check("", name, spec.mtu())?;
        slot.set(limits);
        let c = &mut self.config;
        let configured = (c.vm.iter_mut().find(|v| v.name == name)).map(|v| &mut v.limits);
        let configured = configured
            .or_else(|| (c.tap.iter_mut().find(|t| t.name == name)).map(|t| &mut t.limits))
            .or_else(|| (c.uplink.iter_mut().find(|u| u.name == name)).map(|u| &mut u.limits));
        if let Some(l) = configured {
            *l = limits;
        }
        Ok(())
    }

    /// Apply the difference between the ports now and `new`'s: removed
    /// ports go, added ones come, a port whose rate limits alone changed
    /// gets them in place, a port whose configuration changed otherwise is
    /// removed and added again; the rest are not touched. `new` is checked
    /// whole first, so an invalid file changes nothing. A port that cannot
    /// be added (its socket in use, say) stops the reload there: what was
    /// applied stays, and the error says which port.
    pub(super) fn reload(&mut self, new: &DaemonConfig) -> Result<ReloadReport, DaemonError> {
        new.validate()?;
        // The file's ports as they run; the run-time ones are not the file's.
        let now: Vec<PortSpec> = (self.config.ports().into_iter())
            .filter(|p| !self.run_time.contains(p.name()))
            .collect();
        let wanted = new.ports();
        let named =
            |ports: &[PortSpec], name: &str| ports.iter().find(|p| p.name() == name).cloned();
        let mut report = ReloadReport {
            need_restart: settings_changed(&self.config, new),
            ..Default::default()
        };
        let mut to_add = Vec::new();
        for p in &now {
            match named(&wanted, p.name()) {
                None => {
                    self.remove(p.name())?;
                    report.removed.push(p.name().to_owned());
                }
                Some(w) if &w != p => match limits_alone_changed(p, &w) {
                    Some(limits) => {
                        self.set_limits(p.name(), limits)?;
                        report.limits_changed.push(p.name().to_owned());
                    }
                    None => {
                        self.remove(p.name())?;
                        report.restarted.push(p.name().to_owned());
                        to_add.push(w);
                    }
                },
                Some(_) => report.unchanged += 1,
            }
        }
        for w in &wanted {
            if named(&now, w.name()).is_none() {
                if self.run_time.contains(w.name()) {
                    // The file's port wins; the state file keeps this one.
                    self.remove(w.name())?;
                    report.replaced_run_time.push(w.name().to_owned());
                }
                report.added.push(w.name().to_owned());
                to_add.push(w.clone());
            }
        }
        report.unchanged += self.run_time.len();
        for p in to_add {
            let name = p.name().to_owned();
            if let Err(e) = self.add(p) {
                return Err(DaemonError::ReloadStopped {
                    port: name,
                    applied: Box::new(report),
                    cause: Box::new(e),
                });
            }
        }
        Ok(report)
    }

    /// The error for a port named `name` that is not there.
    fn no_port(&self, name: &str) -> DaemonError {
        DaemonError::NoPort {
            port: name.to_owned(),
            ports: (self.config.ports().iter())
                .map(|p| p.name().to_owned())
                .collect(),
        }
    }

    /// The configuration as the ports are now (tests).
    #[cfg(test)]
    pub(super) fn config(&self) -> &DaemonConfig {
        &self.config
    }

    /// The VM ports that run.
    pub(super) fn vms(&self) -> &[RunningVm] {
        &self.vms
    }

    /// Stop every port: each VM port's connection ended and its thread
    /// joined, then each removed from the switch with its socket file.
    pub(super) fn shutdown(&mut self) {
        self.closed = true;
        // Every serve loop is told first, so that they all wind down at once.
        for v in &mut self.vms {
            v.begin_stop();
        }
        for v in &mut self.vms {
            v.finish_stop();
        }
        for v in std::mem::take(&mut self.vms) {
            self.roster.remove(v.port.name());
            self.maker.remove_vm(v);
        }
        for h in std::mem::take(&mut self.hosts) {
            self.roster.remove(h.spec.name());
            self.maker.remove_host(h);
        }
    }
}

/// `wanted`'s rate limits, when they are all that differs from `now` (two
/// configurations of one port, of a kind that has limits).
fn limits_alone_changed(now: &PortSpec, wanted: &PortSpec) -> Option<PortLimits> {
    let limits = wanted.limits()?;
    let mut now = now.clone();
    *now.limits_mut()? = limits;
    (now == *wanted).then_some(limits)
}

/// The settings other than the ports that differ between `old` and `new`,
/// by their names in the file.
fn settings_changed(old: &DaemonConfig, new: &DaemonConfig) -> Vec<String> {
    let mut v = Vec::new();
    let mut check = |name: &str, same: bool| {
        if !same {
            v.push(name.to_owned());
        }
    };
    check("control", old.control == new.control);
    check("metrics", old.metrics == new.metrics);
    check("cpus", old.cpus == new.cpus);
    check("policy", old.policy == new.policy);
    check("backlog", old.backlog == new.backlog);
    check("mac_ageing_s", old.mac_ageing_s == new.mac_ageing_s);
    check("mac_table_size", old.mac_table_size == new.mac_table_size);
    check(
        "max_learned_per_port",
        old.max_learned_per_port == new.max_learned_per_port,
    );
    check("socket_group", old.socket_group == new.socket_group);
    check("netap_ml_model", old.netap_ml_model == new.netap_ml_model);
    check("cores", old.cores == new.cores);
    check("state_dir", old.state_dir == new.state_dir);
    check("state_strict", old.state_strict == new.state_strict);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse_local_spec, parse_tap_spec, parse_uplink_spec, parse_vm_spec};

    fn vm(spec: &str) -> PortSpec {
        PortSpec::Vm(Box::new(parse_vm_spec(spec).unwrap()))
    }

    #[test]
    fn only_a_change_of_limits_alone_is_applied_in_place() {
        let now = vm("name=a,socket=/a");
        let limited = vm("name=a,socket=/a,storm_control_pps=10");
        let want = PortLimits {
            storm_control_pps: 10,
            ..PortLimits::NONE
        };
        assert_eq!(limits_alone_changed(&now, &limited), Some(want));
        assert_eq!(limits_alone_changed(&limited, &now), Some(PortLimits::NONE));
        // Anything else changed as well: the port is made again.
        let also_queues = vm("name=a,socket=/a,storm_control_pps=10,queues=2");
        assert_eq!(limits_alone_changed(&now, &also_queues), None);
        // New allowed_ips (the port's rules in the switch): made again.
        let mac = "name=a,socket=/a,mac=02:00:00:00:00:a1";
        let guarded = vm(&format!("{mac},allowed_ips=10.0.0.5"));
        assert_eq!(limits_alone_changed(&vm(mac), &guarded), None);
        let sink = PortSpec::Sink(parse_local_spec("--sink", "a").unwrap());
        assert_eq!(limits_alone_changed(&sink, &now), None);
        assert_eq!(limits_alone_changed(&now, &sink), None);
        // TAP and uplink ports the same way.
        let tap = |s: &str| PortSpec::Tap(parse_tap_spec(s).unwrap());
        let (t0, t1) = (tap("t0"), tap("t0,storm_control_pps=10"));
        assert_eq!(limits_alone_changed(&t0, &t1), Some(want));
        assert_eq!(limits_alone_changed(&t0, &tap("t0,mtu=9000")), None);
        let up = |s: &str| PortSpec::Uplink(parse_uplink_spec(s).unwrap());
        let (u0, u1) = (up("iface=e"), up("iface=e,storm_control_pps=10"));
        assert_eq!(limits_alone_changed(&u1, &u0), Some(PortLimits::NONE));
        assert_eq!(limits_alone_changed(&u0, &up("iface=e,queues=2")), None);
        assert_eq!(limits_alone_changed(&t0, &u1), None, "another kind");
    }
}
