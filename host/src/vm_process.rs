//! Which process is a VM's QEMU, and which threads of it vSPACE may move.
//!
//! vadapt runs as root and moves the threads that QEMU names over QMP
//! (`query-cpus-fast`'s `thread-id`). A thread id alone could name any
//! thread on the host, so a compromised QEMU, or any process that serves a
//! socket vadapt is told is QMP, could make vadapt re-pin or re-cgroup
//! threads that are not the VM's. Every thread id is therefore tied to the
//! QMP peer's own process:
//!
//! ```text
//!   connect to the QMP socket
//!   pid = SO_PEERCRED of the connection           the kernel's word, not QEMU's
//!                                                 (vadapt_qemu's QmpClient::peer_pid)
//!   VmProcess::identify(pid):
//!       qemu_pidfile configured → it must hold pid
//!       else never vadapt itself, and /proc/<pid>/cmdline must name the socket (-qmp unix:PATH,...,
//!            -chardev socket,path=PATH,...; relative to /proc/<pid>/cwd)
//!   for each thread-id: /proc/<pid>/task/<tid> must exist  → TaskId (with
//!       its start time; the applier re-checks it before every move)
//! ```
//!
//! libvirt passes QEMU its monitor socket as a file descriptor, so the path
//! is not on QEMU's command line; give the VM's pidfile
//! (`/run/libvirt/qemu/<domain>.pid`) as `qemu_pidfile` there.

use crate::thread_group::{TaskId, TaskIdError};
use std::io;
use std::path::{Path, PathBuf};

/// The VM's QEMU could not be identified.
#[derive(Debug, thiserror::Error)]
pub enum VmProcessError {
    /// The peer is vadapt itself.
    #[error("the QMP peer (pid {pid}) is vadapt itself, not QEMU")]
    OwnProcess {
        /// Our pid.
        pid: u32,
    },
    /// The configured pidfile could not be read or holds no pid.
    #[error("failed to read a pid from {path}")]
    Pidfile {
        /// The pidfile.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The peer is not the process the pidfile names.
    #[error("the QMP peer is pid {peer}, but {path} names pid {named}")]
    NotThePidfilesProcess {
        /// The pidfile.
        path: PathBuf,
        /// The pid in it.
        named: u32,
        /// The peer's pid.
        peer: u32,
    },
    /// The peer's command line could not be read.
    #[error("failed to read the command line of the QMP peer (pid {pid})")]
    Cmdline {
        /// The peer's pid.
        pid: u32,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The peer's command line does not name the socket.
    #[error(
        "the QMP peer (pid {pid}) does not name {} on its command line, so it is not \
         taken as the VM's QEMU (give qemu_pidfile where QEMU gets its socket as a \
         file descriptor, as under libvirt)",
        socket.display()
    )]
    NotNamed {
        /// The peer's pid.
        pid: u32,
        /// The QMP socket.
        socket: PathBuf,
    },
}

/// A process checked to be a VM's QEMU. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmProcess {
    /// Its pid.
    pub pid: u32,
}

impl VmProcess {
    /// Check that `peer` (the pid behind the QMP socket `socket`) is the
    /// VM's QEMU: the process `pidfile` names if one is configured (the
    /// operator's word against the kernel's), else a process other than
    /// this one whose command line names `socket` (vadapt's own command
    /// line names it too, in `--vm ...,qmp=PATH`).
    pub fn identify(
        proc_root: &Path,
        socket: &Path,
        peer: u32,
        pidfile: Option<&Path>,
    ) -> Result<VmProcess, VmProcessError> {
        if let Some(path) = pidfile {
            let named = read_pidfile(path)?;
            return if named == peer {
                Ok(VmProcess { pid: peer })
            } else {
                Err(VmProcessError::NotThePidfilesProcess {
                    path: path.to_path_buf(),
                    named,
                    peer,
                })
            };
        }
        if peer == std::process::id() {
            return Err(VmProcessError::OwnProcess { pid: peer });
        }
        let proc_dir = proc_root.join(peer.to_string());
        let cmdline = std::fs::read(proc_dir.join("cmdline"))
            .map_err(|source| VmProcessError::Cmdline { pid: peer, source })?;
        let cwd = std::fs::read_link(proc_dir.join("cwd")).ok();
        if names_socket(&cmdline, cwd.as_deref(), socket) {
            Ok(VmProcess { pid: peer })
        } else {
            Err(VmProcessError::NotNamed {
                pid: peer,
                socket: socket.to_path_buf(),
            })
        }
    }

    /// Thread `tid` as one of this process's threads; an error if it is
    /// not one (whatever else it is).
    pub fn thread(&self, proc_root: &Path, tid: u32) -> Result<TaskId, TaskIdError> {
        TaskId::of_process(proc_root, self.pid, tid)
    }
}

/// The pid on the first line of `path`.
fn read_pidfile(path: &Path) -> Result<u32, VmProcessError> {
    let err = |source| VmProcessError::Pidfile {
        path: path.to_path_buf(),
        source,
    };
    let text = std::fs::read_to_string(path).map_err(err)?;
    text.lines()
        .next()
        .and_then(|l| l.trim().parse::<u32>().ok())
        .filter(|&p| p > 0)
        .ok_or_else(|| err(io::Error::other("no pid in it")))
}

/// Whether one of the NUL-separated arguments in `cmdline` names `socket`:
/// the argument itself, or one of its comma-separated options' values
/// (`path=PATH`, `unix:PATH`), relative paths taken from `cwd`.
fn names_socket(cmdline: &[u8], cwd: Option<&Path>, socket: &Path) -> bool {
    let want = std::fs::canonicalize(socket).unwrap_or_else(|_| socket.to_path_buf());
    let same = |candidate: &str| {
        let candidate = candidate.strip_prefix("unix:").unwrap_or(candidate);
        if candidate.is_empty() {
            return false;
        }
        let p = Path::new(candidate);
        let p = match cwd {
            Some(cwd) if p.is_relative() => cwd.join(p),
            _ => p.to_path_buf(),
        };
        p == want || std::fs::canonicalize(&p).is_ok_and(|c| c == want)
    };
    cmdline
        .split(|&b| b == 0)
        .filter_map(|arg| std::str::from_utf8(arg).ok())
        .any(|arg| {
            same(arg)
                || arg.split(',').any(|opt| {
                    same(opt) || opt.split_once('=').is_some_and(|(_, value)| same(value))
                })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dir::TestDir;
    use std::os::unix::net::UnixListener;

    #[test]
    fn a_command_line_names_the_socket_in_any_of_qemus_forms() {
        let t = TestDir::new("cmdline");
        let sock = t.0.join("vm1.qmp");
        let _l = UnixListener::bind(&sock).unwrap();
        let abs = sock.display().to_string();
        let argv = |args: &[&str]| args.join("\0").into_bytes();
        let forms = [
            format!("-qmp\0unix:{abs},server=on,wait=off"),
            format!("-chardev\0socket,id=mon0,path={abs},server=on,wait=off"),
            format!("--qmp\0{abs}"),
        ];
        for f in &forms {
            assert!(names_socket(f.as_bytes(), None, &sock), "{f}");
        }
        // Relative to the process's working directory.
        let rel = argv(&["qemu", "-qmp", "unix:vm1.qmp,server=on"]);
        assert!(names_socket(&rel, Some(&t.0), &sock));
        assert!(!names_socket(&rel, Some(Path::new("/")), &sock));
        // A longer path that merely contains it, or another socket.
        let other = argv(&["sleep", &format!("{abs}.x"), "-qmp", "unix:/tmp/other.qmp"]);
        assert!(!names_socket(&other, None, &sock));
        assert!(!names_socket(b"", None, &sock));
    }

    #[test]
    fn identify_checks_pidfile_command_line_and_never_takes_itself() {
        let t = TestDir::new("identify");
        let sock = t.0.join("vm.qmp");
        let me = std::process::id();
        // This test's command line does not name the socket, but vadapt's
        // would: its own pid is refused before the command line is read.
        assert!(matches!(
            VmProcess::identify(Path::new("/proc"), &sock, me, None),
            Err(VmProcessError::OwnProcess { .. })
        ));
        t.write(
            "proc/4200/cmdline",
            &format!("qemu\0-qmp\0unix:{},server=on", sock.display()),
        );
        t.write("proc/4300/cmdline", "sleep\0x");
        let proc_root = t.0.join("proc");
        assert_eq!(
            VmProcess::identify(&proc_root, &sock, 4200, None).unwrap(),
            VmProcess { pid: 4200 }
        );
        assert!(matches!(
            VmProcess::identify(&proc_root, &sock, 4300, None),
            Err(VmProcessError::NotNamed { pid: 4300, .. })
        ));
        assert!(matches!(
            VmProcess::identify(&proc_root, &sock, 4400, None),
            Err(VmProcessError::Cmdline { pid: 4400, .. })
        ));
        // A pidfile decides alone.
        t.write("vm.pid", "4300\n");
        let pidfile = t.0.join("vm.pid");
        assert_eq!(
            VmProcess::identify(&proc_root, &sock, 4300, Some(&pidfile)).unwrap(),
            VmProcess { pid: 4300 }
        );
        assert!(matches!(
            VmProcess::identify(&proc_root, &sock, 4200, Some(&pidfile)),
            Err(VmProcessError::NotThePidfilesProcess {
                named: 4300,
                peer: 4200,
                ..
            })
        ));
        t.write("bad.pid", "x\n");
        assert!(matches!(
            VmProcess::identify(&proc_root, &sock, 4300, Some(&t.0.join("bad.pid"))),
            Err(VmProcessError::Pidfile { .. })
        ));
    }

    #[test]
    fn only_the_processs_own_threads_are_named() {
        let t = TestDir::new("vmthreads");
        t.write(
            "4200/task/4201/stat",
            "4201 (CPU 0/KVM) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 42 0 0\n",
        );
        let vm = VmProcess { pid: 4200 };
        assert_eq!(vm.thread(&t.0, 4201).unwrap().start, 42);
        // A thread of another process (here: of this test) is refused.
        assert!(vm.thread(&t.0, std::process::id()).is_err());
    }
}
