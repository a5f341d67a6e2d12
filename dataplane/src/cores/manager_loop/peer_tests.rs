//! The core manager against hostile and slow peers: thread ids that are
//! not the VM's, a QMP socket that never answers, refused `stop` and
//! `cont`. Helpers come from the manager's own tests.

use super::tests::{manager, parked, port, scripted_qmp, step_until};
use super::*;
use crate::cores::CoresSnapshot;
use std::os::unix::net::UnixListener;
use std::process::{Child, Command};
use vadapt_host::affinity::thread_affinity;

/// A `sleep` process: a thread on this host that is no VM's.
struct Bystander(Child);

impl Bystander {
    fn start() -> Bystander {
        Bystander(Command::new("sleep").arg("60").spawn().unwrap())
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The id of a thread of this process that has exited.
fn exited_tid() -> u32 {
    std::thread::spawn(vadapt_host::cputime::current_tid)
        .join()
        .unwrap()
}

/// This process's cgroup in the v1 cpuset hierarchy (`/proc/self/cgroup`),
/// if the host has one.
fn own_v1_cpuset() -> Option<String> {
    std::fs::read_to_string("/proc/self/cgroup")
        .ok()?
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
            ctl.split(',')
                .any(|c| c == "cpuset")
                .then(|| path.to_string())
        })
}

/// A proc root whose `self/mountinfo` mounts a fake v1 cpuset hierarchy at
/// `<dir>/cg` (with the `vadapt` parent and this process's own cgroup in
/// it), and whose `<pid>` entries link to the real `/proc/<pid>`.
fn fake_proc_and_cgroups(dir: &Path, cpus: &[usize], pids: &[u32], own_cgroup: &str) {
    let proc_root = dir.join("proc");
    std::fs::create_dir_all(proc_root.join("self")).unwrap();
    for pid in pids {
        std::os::unix::fs::symlink(format!("/proc/{pid}"), proc_root.join(pid.to_string()))
            .unwrap();
    }
    let cg = dir.join("cg");
    std::fs::write(
        proc_root.join("self/mountinfo"),
        format!(
            "34 31 0:31 / {} rw,relatime - cgroup cgroup rw,cpuset\n",
            cg.display()
        ),
    )
    .unwrap();
    let list = cpus
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",");
    for d in ["", "vadapt"] {
        std::fs::create_dir_all(cg.join(d)).unwrap();
        std::fs::write(cg.join(d).join("cpuset.cpus"), &list).unwrap();
        std::fs::write(cg.join(d).join("cpuset.mems"), "0").unwrap();
    }
    let own = cg.join(own_cgroup.trim_start_matches('/'));
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(own.join("tasks"), "").unwrap();
}

#[test]
fn thread_ids_that_are_not_the_vms_are_refused_and_moved_ones_put_back() {
    let own = vadapt_host::cputime::current_affinity().unwrap();
    if own.len() < 2 {
        eprintln!("skipped: needs 2 CPUs in this process's affinity, has {own:?}");
        return;
    }
    let cpus = own[..2].to_vec();
    for method in [ApplyMethod::Affinity, ApplyMethod::Cpuset] {
        let own_cgroup = match (method, own_v1_cpuset()) {
            (ApplyMethod::Cpuset, None) => {
                eprintln!("cpuset leg skipped: this host has no v1 cpuset hierarchy");
                continue;
            }
            (_, cg) => cg.unwrap_or_default(),
        };
        let dir = tempfile::tempdir().unwrap();
        let qmp = dir.path().join("qmp.sock");
        let (tids, release, threads) = parked(1);
        let legit = tids[0];
        let sleeper = Bystander::start();
        let gone = exited_tid();
        let me = std::process::id();
        fake_proc_and_cgroups(dir.path(), &cpus, &[me, sleeper.pid()], &own_cgroup);
        let before = thread_affinity(legit).unwrap();
        let sleeper_before = thread_affinity(sleeper.pid()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        // A compromised QEMU (this process, named by the pidfile) names one
        // thread of its own, a thread of another process, and a thread of
        // its own that has exited.
        let (_, server) = scripted_qmp(
            &qmp,
            vec![legit, sleeper.pid(), gone],
            Vec::new(),
            Arc::clone(&stop),
        );
        let pidfile = qmp.with_extension("pid");
        std::fs::write(&pidfile, format!("{me}\n")).unwrap();
        let p = port(&format!(
            "name=vm1,socket=/nonexistent.sock,qmp={},qemu_pidfile={}",
            qmp.display(),
            pidfile.display()
        ));
        let status = Arc::new(CoresStatus::default());
        let mut m = CoreManager::new(
            CoresConfig {
                mode: VspaceMode::Performance,
                cpus: cpus.clone(),
                apply: method,
                cgroup: Some(dir.path().join("cg/vadapt")),
                ..CoresConfig::default()
            },
            Arc::new(Roster::new(vec![p])),
            Arc::clone(&status),
            &dir.path().join("proc"),
            Path::new("/nonexistent"),
        );
        let (s, _) = step_until(&mut m, &status, Instant::now(), |s: &CoresSnapshot| {
            s.threads_moved >= 1
        });
        let placed = if method == ApplyMethod::Affinity {
            Placement::Affinity
        } else {
            Placement::Cpuset
        };
        assert_eq!(s.apply, placed, "{s:?}");
        assert_eq!(s.vms[0].vcpu_tids, [legit], "{s:?}");
        assert_eq!(s.foreign_tids_refused, 2, "{s:?}");
        assert_eq!(thread_affinity(sleeper.pid()).unwrap(), sleeper_before);
        let members = |group: &str| {
            std::fs::read_to_string(dir.path().join(format!("cg/vadapt/{group}/tasks")))
                .unwrap_or_default()
        };
        match method {
            ApplyMethod::Affinity => assert_eq!(thread_affinity(legit).unwrap(), s.sets.vcpu),
            _ => {
                assert_eq!(members("vcpu"), legit.to_string());
                for group in ["vcpu", "nq", "be"] {
                    assert!(!members(group).contains(&sleeper.pid().to_string()));
                }
            }
        }

        // The manager stops: the thread it moved gets back what it had.
        m.release();
        assert_eq!(status.snapshot().threads_restored, 1);
        assert_eq!(thread_affinity(legit).unwrap(), before);
        match method {
            ApplyMethod::Affinity => {}
            _ => {
                let own = dir
                    .path()
                    .join("cg")
                    .join(own_cgroup.trim_start_matches('/'))
                    .join("tasks");
                assert_eq!(std::fs::read_to_string(own).unwrap(), legit.to_string());
            }
        }
        assert_eq!(thread_affinity(sleeper.pid()).unwrap(), sleeper_before);
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
        drop(release);
        for h in threads {
            h.join().unwrap();
        }
    }
}

#[test]
fn a_silent_qmp_peer_delays_only_its_own_vm() {
    let own = vadapt_host::cputime::current_affinity().unwrap();
    if own.len() < 2 {
        eprintln!("skipped: needs 2 CPUs in this process's affinity, has {own:?}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // vm1's QMP accepts connections and never says a word.
    let silent = dir.path().join("silent.sock");
    let _held = UnixListener::bind(&silent).unwrap();
    let talking = dir.path().join("talking.sock");
    let (tids, release, threads) = parked(1);
    let stop = Arc::new(AtomicBool::new(false));
    let (_, server) = scripted_qmp(&talking, tids.clone(), Vec::new(), Arc::clone(&stop));
    let me = std::process::id();
    let pidfile = dir.path().join("vm.pid");
    std::fs::write(&pidfile, format!("{me}\n")).unwrap();
    let ports: Vec<_> = [("vm1", &silent), ("vm2", &talking)]
        .iter()
        .map(|(name, qmp)| {
            port(&format!(
                "name={name},socket=/nonexistent-{name}.sock,qmp={},qemu_pidfile={}",
                qmp.display(),
                pidfile.display()
            ))
        })
        .collect();
    let status = Arc::new(CoresStatus::default());
    let mut m = CoreManager::new(
        CoresConfig {
            mode: VspaceMode::Performance,
            cpus: own[..2].to_vec(),
            ..CoresConfig::default()
        },
        Arc::new(Roster::new(ports)),
        Arc::clone(&status),
        Path::new("/proc"),
        Path::new("/nonexistent"),
    );
    // vm2 is found and placed while vm1's lookup still waits on its peer
    // (its deadline is 2 s away): every period ran, none waited.
    let (s, _) = step_until(&mut m, &status, Instant::now(), |s: &CoresSnapshot| {
        s.threads_moved >= 1
    });
    assert!(
        m.vms[0].qmp_worker.as_ref().is_some_and(|w| !w.idle()),
        "vm1's lookup is still out"
    );
    assert!(s.vms[0].vcpu_tids.is_empty(), "{s:?}");
    assert_eq!(s.vms[1].vcpu_tids, tids, "{s:?}");
    assert_eq!(thread_affinity(tids[0]).unwrap(), s.sets.vcpu);
    m.release();
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    drop(release);
    for h in threads {
        h.join().unwrap();
    }
}

/// Step `periods` periods of 100 ms simulated time, a real 2 ms apart.
fn run_periods(m: &mut CoreManager, t0: Instant, periods: u32) -> Instant {
    let mut now = t0;
    for _ in 0..periods {
        m.step(now);
        now += Duration::from_millis(100);
        std::thread::sleep(Duration::from_millis(2));
    }
    now
}

#[test]
fn a_refused_stop_backs_off_and_a_failed_cont_is_retried_until_it_works() {
    let dir = tempfile::tempdir().unwrap();
    let qmp = dir.path().join("qmp.sock");
    let stop = Arc::new(AtomicBool::new(false));
    let (seen, server) = scripted_qmp(
        &qmp,
        Vec::new(),
        vec![("stop", usize::MAX), ("cont", 1)],
        Arc::clone(&stop),
    );
    let (mut m, status) = manager(
        &qmp,
        CoresConfig {
            mode: VspaceMode::Off,
            cpus: vec![0],
            apply: ApplyMethod::Advise,
            ..CoresConfig::default()
        },
    );
    m.vms[0].role = VmRole::Be;
    let count = |cmd: &str| seen.lock().unwrap().iter().filter(|c| *c == cmd).count();
    // 6 s: tries at about 0, 1 and 3 s (then 7 s), not one a period.
    m.want_best_effort_paused(true);
    let t = run_periods(&mut m, Instant::now(), 60);
    let stops = count("stop");
    assert!((2..=4).contains(&stops), "{stops} stops in 60 periods");
    assert!(!status.snapshot().vms[0].paused);
    assert!(m.vms[0]
        .run_error
        .as_deref()
        .unwrap()
        .contains("no stop today"));

    // In mode off, a VM that is paused is resumed, even when the first
    // `cont` is refused.
    m.want_best_effort_paused(false);
    m.vms[0].paused = true;
    let deadline = t + Duration::from_secs(60);
    let mut now = t;
    while m.vms[0].paused {
        assert!(now < deadline, "never resumed: {:?}", seen.lock().unwrap());
        now = run_periods(&mut m, now, 1);
    }
    assert_eq!(count("cont"), 2, "{:?}", seen.lock().unwrap());
    assert!(!status.snapshot().vms[0].paused);
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
}

#[test]
fn a_stop_whose_answer_was_not_taken_is_undone_by_the_release() {
    let dir = tempfile::tempdir().unwrap();
    let qmp = dir.path().join("qmp.sock");
    let stop = Arc::new(AtomicBool::new(false));
    let (seen, server) = scripted_qmp(&qmp, Vec::new(), Vec::new(), Arc::clone(&stop));
    let (mut m, _status) = manager(
        &qmp,
        CoresConfig {
            mode: VspaceMode::Off,
            cpus: vec![0],
            apply: ApplyMethod::Advise,
            ..CoresConfig::default()
        },
    );
    m.vms[0].role = VmRole::Be;
    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    // The first period's lookup, answered and taken.
    let t0 = Instant::now();
    m.step(t0);
    let idle = |m: &CoreManager| m.vms[0].qmp_worker.as_ref().is_some_and(|w| w.idle());
    wait_for("lookup never answered", &|| idle(&m));
    m.step(t0 + Duration::from_millis(1));
    // A period sends `stop`; QEMU gets it, but no period takes its answer.
    m.want_best_effort_paused(true);
    m.step(t0 + Duration::from_millis(2));
    wait_for("stop never sent", &|| {
        seen.lock().unwrap().iter().any(|c| c == "stop")
    });
    assert!(!m.vms[0].paused, "the answer was not taken");
    m.release();
    assert!(
        seen.lock().unwrap().iter().any(|c| c == "cont"),
        "the VM the stop paused was resumed: {:?}",
        seen.lock().unwrap()
    );
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
}
