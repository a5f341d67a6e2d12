//! Ports added at run time across restarts of the daemon: kept in the state
//! file, restored at start after the config file's (which win a name
//! clash), removed by `del-port`, left alone by a reload; an unusable file
//! moved aside, or start refused under `state_strict`.

use super::port_state::{self, FILE_NAME};
use super::*;
use crate::config::{parse_local_spec, parse_vm_spec};
use std::path::Path;
use vadapt_host::error_chain::error_chain;

fn cfg(dir: &Path) -> DaemonConfig {
    let mut c = DaemonConfig {
        control: dir.join("control.sock"),
        state_dir: Some(dir.join("state")),
        ..DaemonConfig::default()
    };
    c.sink.push(parse_local_spec("--sink", "s0").unwrap());
    c
}

fn vm(dir: &Path, name: &str) -> PortSpec {
    let spec = format!(
        "name={name},socket={}",
        dir.join(format!("{name}.sock")).display()
    );
    PortSpec::Vm(Box::new(parse_vm_spec(&spec).unwrap()))
}

fn echo(name: &str) -> PortSpec {
    PortSpec::Echo(parse_local_spec("--echo", name).unwrap())
}

fn names(d: &Daemon) -> Vec<String> {
    let mut v: Vec<String> = d
        .shared
        .book()
        .config()
        .ports()
        .iter()
        .map(|p| p.name().to_owned())
        .collect();
    v.sort();
    v
}

fn in_file(dir: &Path) -> Vec<String> {
    let ports = port_state::read(&dir.join("state").join(FILE_NAME)).unwrap();
    let mut v: Vec<String> = ports.iter().map(|p| p.name().to_owned()).collect();
    v.sort();
    v
}

#[test]
fn ports_added_at_run_time_come_back_after_a_restart_and_deleted_ones_do_not() {
    let t = tempfile::tempdir().unwrap();
    let d = Daemon::start(cfg(t.path())).unwrap();
    d.add_port(vm(t.path(), "v1")).unwrap();
    d.add_port(echo("e1")).unwrap();
    d.add_port(vm(t.path(), "v2")).unwrap();
    d.remove_port("v1").unwrap();
    assert_eq!(in_file(t.path()), ["e1", "v2"]);
    // A config file's port removed at run time is not in the file, before
    // or after.
    d.remove_port("s0").unwrap();
    assert_eq!(in_file(t.path()), ["e1", "v2"]);
    // Rate limits of a run-time port are kept with it.
    let limits = PortLimits {
        storm_control_pps: 10,
        ..PortLimits::NONE
    };
    d.set_limits("v2", limits).unwrap();
    // So is a policy set at run time, and a later change of limits keeps it;
    // the config file's sink has none to keep.
    let eekbp = PolicyConfig::default_for(vadapt_policy::PolicyKind::Eekbp);
    d.set_policy("v2", eekbp).unwrap();
    d.set_limits("v2", limits).unwrap();
    d.shutdown();

    let d = Daemon::start(cfg(t.path())).unwrap();
    assert_eq!(names(&d), ["e1", "s0", "v2"]);
    let v2 = d
        .shared
        .book()
        .config()
        .vm
        .iter()
        .find(|v| v.name == "v2")
        .unwrap()
        .limits;
    assert_eq!(v2, limits);
    let policy = (d.shared.book().config().vm.iter())
        .find(|v| v.name == "v2")
        .and_then(|v| v.policy);
    assert_eq!(policy, Some(eekbp));
    assert!(t.path().join("v2.sock").exists());
    d.shutdown();
}

#[test]
fn the_config_files_port_wins_a_name_clash_and_a_reload_leaves_run_time_ports_alone() {
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("vadapt.toml");
    let write = |extra: &str| {
        let text = format!(
            "control = \"{}\"\nstate_dir = \"{}\"\n[[sink]]\nname = \"s0\"\n{extra}",
            t.path().join("control.sock").display(),
            t.path().join("state").display()
        );
        std::fs::write(&file, text).unwrap();
    };
    write("");
    let d = Daemon::start(DaemonConfig::from_file(&file).unwrap()).unwrap();
    let source = file.clone();
    d.set_config_source(Box::new(move || {
        DaemonConfig::from_file(&source).map_err(Into::into)
    }));
    d.add_port(echo("e1")).unwrap();
    d.add_port(echo("e2")).unwrap();
    let state = t.path().join("state").join(FILE_NAME);
    let before = std::fs::read(&state).unwrap();
    // Not in the file: a reload keeps them, and writes no state.
    let report = d.reload().unwrap();
    assert!(report.removed.is_empty(), "{report}");
    assert_eq!(report.unchanged, 3, "{report}");
    assert_eq!(names(&d), ["e1", "e2", "s0"]);
    // The file now has a sink named e2: it replaces the run-time echo.
    write("[[sink]]\nname = \"e2\"\n");
    let report = d.reload().unwrap();
    assert_eq!(report.replaced_run_time, ["e2"], "{report}");
    assert_eq!(report.added, ["e2"], "{report}");
    assert_eq!(d.shared.book().config().sink.len(), 2);
    assert_eq!(
        std::fs::read(&state).unwrap(),
        before,
        "a reload writes no state"
    );
    d.shutdown();
    // At start too: the file's sink e2, the state's echo e1.
    let d = Daemon::start(DaemonConfig::from_file(&file).unwrap()).unwrap();
    let book = d.shared.book();
    let sinks: Vec<_> = book.config().sink.iter().map(|s| s.name.as_str()).collect();
    let echoes: Vec<_> = book.config().echo.iter().map(|s| s.name.as_str()).collect();
    assert_eq!((sinks, echoes), (vec!["s0", "e2"], vec!["e1"]));
    drop(book);
    // del-port of the file's e2 takes the shadowed entry out of the state too.
    d.remove_port("e2").unwrap();
    assert_eq!(in_file(t.path()), ["e1"]);
    d.shutdown();
}

#[test]
fn an_unusable_state_file_is_kept_aside_and_refused_under_strict() {
    let t = tempfile::tempdir().unwrap();
    let state = t.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::write(
        state.join(FILE_NAME),
        "version = 1\n[[echo]]\nname = \"e1\"\nname = \"e2\"\n",
    )
    .unwrap();
    let strict = DaemonConfig {
        state_strict: true,
        ..cfg(t.path())
    };
    let e = Daemon::start(strict.clone()).unwrap_err().to_string();
    assert!(e.contains("ports.toml") && e.contains("corrupt"), "{e}");
    assert!(state.join(FILE_NAME).exists(), "left for the operator");
    assert!(
        !t.path().join("control.sock").exists(),
        "nothing left running"
    );
    // Not strict: the config file's ports, the file moved aside whole.
    let d = Daemon::start(cfg(t.path())).unwrap();
    assert_eq!(names(&d), ["s0"]);
    let aside: Vec<_> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("ports.toml.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    d.shutdown();

    // A port that cannot be restored (its socket is a regular file now):
    // skipped and kept in the file; strict refuses.
    let d = Daemon::start(cfg(t.path())).unwrap();
    d.add_port(vm(t.path(), "v1")).unwrap();
    d.shutdown();
    std::fs::write(t.path().join("v1.sock"), b"precious").unwrap();
    let e = Daemon::start(strict).unwrap_err().to_string();
    assert!(e.contains("`v1`") && e.contains("--strict"), "{e}");
    let d = Daemon::start(cfg(t.path())).unwrap();
    assert_eq!(names(&d), ["s0"]);
    assert_eq!(in_file(t.path()), ["v1"]);
    // del-port takes it out of the file.
    d.remove_port("v1").unwrap();
    assert!(in_file(t.path()).is_empty());
    assert!(d.remove_port("v1").is_err());
    d.shutdown();
}

#[test]
fn a_port_whose_state_cannot_be_written_is_not_added() {
    let t = tempfile::tempdir().unwrap();
    let d = Daemon::start(cfg(t.path())).unwrap();
    std::fs::create_dir_all(t.path().join("state").join(".ports.toml.tmp")).unwrap();
    let e = error_chain(&d.add_port(vm(t.path(), "v1")).unwrap_err());
    assert!(
        e.contains("`v1` not added") && e.contains("ports.toml"),
        "{e}"
    );
    assert_eq!(names(&d), ["s0"]);
    assert!(
        !t.path().join("v1.sock").exists(),
        "its socket went with it"
    );
    d.shutdown();
}
