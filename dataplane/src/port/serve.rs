//! The loop that serves one frontend at a time on a VM port's socket (from
//! a [`FrontendSocket`]), hands each request to the port's [`Connection`],
//! closes a connection whose stream can no longer be trusted, and resets
//! the port when the frontend goes away.

use super::frontend_socket::FrontendSocket;
use super::handler::Connection;
use super::raw_requests;
use super::received_fds::recv_closing_fds;
use super::vm_port::VmPort;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use vhost::vhost_user::message::VhostUserVirtioFeatures;
use vhost::vhost_user::{BackendReqHandler, Error as VhostError};

/// What the next message on a frontend's socket carries, seen without
/// taking it (`MSG_PEEK`): its request code, flags and payload size, the `num` of a
/// vring-state payload (the second `u32`, when the payload has one), and how
/// many descriptors ride on it (the peeked duplicates are closed here; the
/// originals stay queued for the real read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Peeked {
    code: u32,
    flags: u32,
    size: u32,
    state_num: Option<u32>,
    fds: usize,
}

/// Peek at the next message on `fd` (see [`Peeked`]). `None` when the peer
/// is gone or sent less than a header.
fn peek_message(fd: std::os::fd::RawFd) -> Option<Peeked> {
    let mut data = [0u8; 20];
    // MSG_PEEK leaves the data in the socket; the duplicated descriptors
    // are closed whatever the message's length (a short header with
    // descriptors, then the end of the stream, must not leave them open).
    // Waiting for the header only: a message with a shorter payload than
    // 8 bytes returns what there is.
    let (n, fds) = recv_closing_fds(fd, &mut data, libc::MSG_PEEK).ok()?;
    if n < 12 {
        return None;
    }
    let word = |i: usize| u32::from_le_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
    Some(Peeked {
        code: word(0),
        flags: word(4),
        size: word(8),
        state_num: (n >= 20).then(|| word(16)),
        fds,
    })
}

/// Whether a frontend waits for an answer to request `code` sent with
/// `flags`: it asked for one (`NEED_REPLY`, with REPLY_ACK), or the request
/// is one whose answer is its reply (`GET_*`, `GET_VRING_BASE`, ...).
fn owes_reply(code: u32, flags: u32) -> bool {
    const NEED_REPLY: u32 = 0x8;
    flags & NEED_REPLY != 0 || ALWAYS_ANSWERED.contains(&code)
}

/// Descriptors one vhost-user message may carry (the `vhost` crate's
/// `MAX_ATTACHED_FD_ENTRIES`).
const MAX_FDS: usize = 32;

/// Requests whose answer is their reply: GET_FEATURES, SET_LOG_BASE (with
/// LOG_SHMFD the frontend waits for it, `need_reply` or not),
/// GET_VRING_BASE, GET_PROTOCOL_FEATURES, GET_QUEUE_NUM, GET_CONFIG,
/// GET_INFLIGHT_FD, GET_MAX_MEM_SLOTS, GET_SHARED_OBJECT.
const ALWAYS_ANSWERED: [u32; 9] = [1, 6, 11, 15, 17, 24, 31, 36, 41];

/// Whether the `vhost` crate, refusing the message `m` with `e`, returned
/// before writing the answer the frontend waits for. It answers a refused
/// `SET_*` (a REPLY_ACK with an error) but not a refused `GET_*`, nor a
/// request it refused itself before asking us: a feature or
/// protocol-feature check, `SET_VRING_ENABLE` with a value other than
/// 0 or 1, or `ADD_MEM_REG` with other than one descriptor
/// (`asked_us`: whether the request reached our handler).
fn answer_skipped(m: &Peeked, e: &VhostError, asked_us: bool) -> bool {
    const SET_VRING_ENABLE: u32 = 18;
    const ADD_MEM_REG: u32 = 37;
    owes_reply(m.code, m.flags)
        && (ALWAYS_ANSWERED.contains(&m.code)
            || matches!(
                e,
                VhostError::InactiveFeature(_) | VhostError::InactiveOperation(_)
            )
            || (m.code == SET_VRING_ENABLE && m.state_num.is_some_and(|n| n > 1))
            || (m.code == ADD_MEM_REG && !asked_us))
}

/// What the serve loop does about an answer the crate skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MakeUp {
    /// Send an error REPLY_ACK for the request.
    ErrorAck,
    /// Close the connection.
    Close,
}

/// How the serve loop makes up for an answer the crate skipped
/// ([`answer_skipped`]) to the message `m`: a request whose answer is a
/// REPLY_ACK, on a connection where the crate sends them
/// (`acks_replies`), gets the error ack the crate would have sent, and
/// the connection goes on (the crate has read the whole message: it
/// refuses only after reading it). Any other (a `GET_*`, whose answer
/// carries a payload; `NEED_REPLY` without REPLY_ACK) ends the
/// connection: the frontend sees it closed, never a hang.
fn make_up(m: &Peeked, acks_replies: bool) -> MakeUp {
    const NEED_REPLY: u32 = 0x8;
    if acks_replies && m.flags & NEED_REPLY != 0 && !ALWAYS_ANSWERED.contains(&m.code) {
        MakeUp::ErrorAck
    } else {
        MakeUp::Close
    }
}

/// Whether refusing `m` with `e` is routine rather than a frontend's
/// mistake: QEMU sends `SET_VRING_ENABLE` as soon as the backend offers
/// `VHOST_USER_F_PROTOCOL_FEATURES`, before it acks any features, and the
/// `vhost` crate refuses it until they are acked.
fn routine_refusal(m: &Peeked, e: &VhostError) -> bool {
    const SET_VRING_ENABLE: u32 = 18;
    m.code == SET_VRING_ENABLE
        && matches!(e, VhostError::InactiveFeature(f) if *f == VhostUserVirtioFeatures::PROTOCOL_FEATURES)
}

/// One frontend's stream of requests, as the serve loop takes them: each
/// is peeked at first (descriptor count, the requests this crate handles
/// itself: `SEND_RARP`, `SET_LOG_FD`), handed to the `vhost` crate's handler
/// over the port's [`Connection`], and its outcome classified: refused and
/// answered (the connection goes on), or the end of the connection (the
/// reason logged once). The fuzz target drives the same code.
pub struct RequestStream {
    handler: BackendReqHandler<Mutex<Connection>>,
    conn: Arc<Mutex<Connection>>,
    /// The connection's port, whose limits every line of this stream goes
    /// through ([`VmPort::may_log`]): they outlive the connection, which a
    /// frontend can end and start again at will.
    port: Arc<VmPort>,
    /// The stream's descriptor, valid while `handler` owns the stream.
    raw: std::os::fd::RawFd,
}

impl std::fmt::Debug for RequestStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The `vhost` crate's handler has no Debug; the connection says who.
        f.debug_struct("RequestStream")
            .field("conn", &self.conn)
            .field("raw", &self.raw)
            .finish_non_exhaustive()
    }
}

impl RequestStream {
    /// Requests from `stream`, served over `conn`.
    pub fn new(stream: UnixStream, conn: Arc<Mutex<Connection>>) -> Self {
        let raw = stream.as_raw_fd();
        let port = Arc::clone(&conn.lock().unwrap_or_else(|e| e.into_inner()).port);
        RequestStream {
            handler: BackendReqHandler::from_stream(stream, Arc::clone(&conn)),
            conn,
            port,
            raw,
        }
    }

    /// The line for the end of the connection, `why` it ends; through the
    /// port's limits (a frontend can reconnect and repeat at will).
    fn closing(&self, port: &str, why: &dyn std::fmt::Display) {
        if let Some(held_back) = self.port.may_log(CLOSING) {
            tracing::warn!(port = port, reason = %why, held_back, "closing the frontend's connection; port reset");
        }
    }

    /// The line for a refused request, through the port's limits.
    fn refused(&self, port: &str, request: Option<u32>, error: &dyn std::fmt::Display) {
        if let Some(held_back) = self.port.may_log(REFUSED) {
            tracing::warn!(port = port, request, error = %error, held_back, "vhost-user request refused");
        }
    }

    /// Serves the next request (blocking until it comes); `false` when the
    /// connection must end (why is logged, naming `port`).
    pub fn serve_next(&mut self, port: &str) -> bool {
        // The header of the request about to be handled: when the
        // handler refuses a request that owes an answer, the `vhost`
        // crate sends none for some of them (it returns early); the serve
        // loop then answers it itself, or closes the connection, so that
        // a frontend never hangs waiting.
        let head = peek_message(self.raw);
        if let Some(m) = head.filter(|m| m.fds > MAX_FDS) {
            // recvmsg would drop the descriptors past vhost-user's 32 and
            // the `vhost` crate would retry the read with the header gone:
            // the stream would lose its framing. End it instead.
            let why = format!(
                "request {} with {} file descriptors, more than {MAX_FDS}",
                m.code, m.fds
            );
            self.closing(port, &why);
            return false;
        }
        if let Some(m) = head.filter(|m| raw_requests::is_raw(m.code)) {
            let mut c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            match raw_requests::serve_raw(self.raw, m.code, m.size, &mut c) {
                Ok(Ok(())) => return true,
                Ok(Err(why)) => {
                    drop(c);
                    self.refused(port, Some(m.code), &why);
                    return true;
                }
                Err(e) => {
                    drop(c);
                    self.closing(port, &vadapt_host::error_chain::error_chain(&e));
                    return false;
                }
            }
        }
        let calls_before = self.lock().add_region_calls;
        let result = self.handler.handle_request();
        let (fatal, asked_us, acks_replies) = {
            let mut c = self.lock();
            (
                c.take_fatal(),
                c.add_region_calls != calls_before,
                c.acks_replies(),
            )
        };
        if let Some(why) = fatal {
            self.closing(port, &why);
            return false;
        }
        match result {
            Ok(()) => {}
            Err(VhostError::Disconnected) | Err(VhostError::PartialMessage) => {
                if let Some(held_back) = self.port.may_log("frontend disconnected") {
                    tracing::info!(
                        port = port,
                        held_back,
                        "frontend disconnected; port reset, waiting for a new connection"
                    );
                }
                return false;
            }
            // The request was refused (an error reply went out where the
            // frontend asked for one, unless `answer_skipped`); the
            // connection itself is fine.
            Err(
                e @ (VhostError::InvalidParam
                | VhostError::InvalidOperation(_)
                | VhostError::InactiveFeature(_)
                | VhostError::InactiveOperation(_)
                | VhostError::ReqHandlerError(_)),
            ) => {
                let request = head.map(|m| m.code);
                if head.is_some_and(|m| routine_refusal(&m, &e)) {
                    if let Some(held_back) = self.port.may_log("early SET_VRING_ENABLE") {
                        tracing::debug!(port = port, held_back, "SET_VRING_ENABLE before the features were set (QEMU sends these at start and when the guest's driver loads); ignored, the rings stay disabled until enabled");
                    }
                } else {
                    self.refused(port, request, &e);
                }
                if let Some(m) = head.filter(|m| answer_skipped(m, &e, asked_us)) {
                    match make_up(&m, acks_replies) {
                        MakeUp::ErrorAck => {
                            if let Err(err) = raw_requests::reply(self.raw, m.code, false) {
                                let why = format!("answering refused request {}: {err}", m.code);
                                self.closing(port, &why);
                                return false;
                            }
                        }
                        MakeUp::Close => {
                            let why = format!(
                                "refused request {} owes the frontend an answer the vhost crate does not send",
                                m.code
                            );
                            self.closing(port, &why);
                            return false;
                        }
                    }
                }
            }
            // recvmsg closed the descriptors of a message that carried
            // more than vhost-user's 32 (MSG_CTRUNC): its header is
            // consumed and the stream cannot be trusted any more.
            Err(VhostError::SocketRetry(e)) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                self.closing(
                    port,
                    &"a vhost-user message with more than 32 file descriptors",
                );
                return false;
            }
            Err(e) => {
                if let Some(held_back) = self.port.may_log("malformed message") {
                    tracing::warn!(port = port, error = %e, held_back, "malformed vhost-user message; closing the connection and resetting the port");
                }
                return false;
            }
        }
        true
    }

    /// The connection, for a moment (a panicked holder's data is still
    /// what the handler left).
    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The port's limit of "closing the frontend's connection" lines.
const CLOSING: &str = "closing the connection";
/// The port's limit of "vhost-user request refused" lines.
const REFUSED: &str = "request refused";

/// Serve frontends from `socket`, one at a time, until `stop`. The live
/// connection's socket is published in `live` so that a shutdown can break
/// a blocking read.
pub fn serve(
    port: Arc<VmPort>,
    mut socket: FrontendSocket,
    stop: Arc<AtomicBool>,
    live: Arc<Mutex<Option<UnixStream>>>,
    pool: Option<Arc<crate::worker::pool::NqWorkers>>,
) {
    let runtime = pool.map_or(crate::worker::Runtime::Thread, crate::worker::Runtime::Pool);
    while let Some(stream) = socket.next(port.name(), &stop) {
        let since = std::time::Instant::now();
        // A frontend can reconnect in a loop: through the port's limits.
        if let Some(held_back) = port.may_log("frontend connected") {
            tracing::info!(port = port.name(), held_back, "frontend connected");
        }
        *live.lock().unwrap_or_else(|e| e.into_inner()) = stream.try_clone().ok();
        port.stats.connected.store(true, Ordering::Relaxed);
        // The guest uses the config-space MAC unless it changes it; learning
        // will follow if it does.
        if let Some(i) = port.ingress() {
            i.learn_if_unknown(port.mac);
        }
        let conn = Arc::new(Mutex::new(Connection::served_by(
            Arc::clone(&port),
            runtime.clone(),
        )));
        let mut requests = RequestStream::new(stream, Arc::clone(&conn));
        while !stop.load(Ordering::Relaxed) && requests.serve_next(port.name()) {}
        conn.lock().unwrap_or_else(|e| e.into_inner()).reset();
        *live.lock().unwrap_or_else(|e| e.into_inner()) = None;
        port.stats.connected.store(false, Ordering::Relaxed);
        socket.ended(since.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_that_owe_an_answer() {
        assert!(owes_reply(11, 0x1), "GET_VRING_BASE always answers");
        assert!(owes_reply(6, 0x1), "SET_LOG_BASE always answers");
        assert!(owes_reply(36, 0x1), "GET_MAX_MEM_SLOTS always answers");
        assert!(owes_reply(18, 0x9), "need_reply");
        assert!(!owes_reply(18, 0x1), "SET_VRING_ENABLE without need_reply");
        assert!(!owes_reply(2, 0x1));
        // A refused SET_FEATURES was answered with an error ack; a refused
        // feature check was not, nor an enable with a value past 1.
        let m = |code, flags, state_num| Peeked {
            code,
            flags,
            size: 8,
            state_num,
            fds: 0,
        };
        let invalid = VhostError::InvalidParam;
        assert!(!answer_skipped(&m(2, 0x9, None), &invalid, true));
        assert!(answer_skipped(
            &m(36, 0x9, None),
            &VhostError::InactiveOperation(
                vhost::vhost_user::message::VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
            ),
            false
        ));
        assert!(answer_skipped(&m(18, 0x9, Some(2)), &invalid, false));
        assert!(!answer_skipped(&m(18, 0x9, Some(1)), &invalid, true));
        // A log area we refused: the crate returned before its reply.
        assert!(answer_skipped(&m(6, 0x1, None), &invalid, true));
        // ADD_MEM_REG that never reached us (no or two descriptors), and
        // one we refused ourselves (the crate acked it).
        assert!(answer_skipped(&m(37, 0x9, None), &invalid, false));
        assert!(!answer_skipped(&m(37, 0x9, None), &invalid, true));
        // Made up for: an error ack where the crate sends acks, for a
        // request whose answer is an ack; a close otherwise.
        assert_eq!(make_up(&m(37, 0x9, None), true), MakeUp::ErrorAck);
        assert_eq!(make_up(&m(37, 0x9, None), false), MakeUp::Close);
        assert_eq!(make_up(&m(6, 0x9, None), true), MakeUp::Close);
        assert_eq!(make_up(&m(11, 0x1, None), true), MakeUp::Close);
    }

    #[test]
    fn only_an_early_vring_enable_is_a_routine_refusal() {
        let m = |code| Peeked {
            code,
            flags: 0x1,
            size: 8,
            state_num: Some(0),
            fds: 0,
        };
        let early = VhostError::InactiveFeature(VhostUserVirtioFeatures::PROTOCOL_FEATURES);
        assert!(routine_refusal(&m(18), &early));
        assert!(!routine_refusal(&m(18), &VhostError::InvalidParam));
        assert!(!routine_refusal(&m(2), &early));
    }

    #[test]
    fn a_message_is_peeked_not_taken_and_its_descriptors_counted() {
        use std::io::Read;
        use vmm_sys_util::sock_ctrl_msg::ScmSocket;
        let (a, b) = UnixStream::pair().unwrap();
        let ev = vmm_sys_util::eventfd::EventFd::new(0).unwrap();
        let msg = [
            18u8, 0, 0, 0, 9, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0,
        ];
        let fds = [ev.as_raw_fd(); 3];
        a.send_with_fds(&[&msg[..]], &fds).unwrap();
        let before = std::fs::read_dir("/proc/self/fd").unwrap().count();
        let p = peek_message(b.as_raw_fd()).unwrap();
        assert_eq!(std::fs::read_dir("/proc/self/fd").unwrap().count(), before);
        assert_eq!(
            p,
            Peeked {
                code: 18,
                flags: 9,
                size: 8,
                state_num: Some(2),
                fds: 3
            }
        );
        let mut h = [0u8; 20];
        (&b).read_exact(&mut h).unwrap();
        assert_eq!(h, msg, "still there after the peek");
        drop(a);
        assert_eq!(peek_message(b.as_raw_fd()), None);
    }

    #[test]
    fn a_short_header_with_descriptors_leaves_none_open() {
        // Found by the vhost_user fuzz target once it ran this loop: the
        // peeked duplicates of a message shorter than a header were kept.
        use std::os::fd::FromRawFd;
        use vmm_sys_util::sock_ctrl_msg::ScmSocket;
        // Counted by name: other tests open descriptors meanwhile.
        let open = || {
            std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter(|l| l.to_string_lossy().contains("vadapt-short-peek"))
                .count()
        };
        // SAFETY: a NUL-terminated name; the result is checked.
        let fd = unsafe { libc::memfd_create(c"vadapt-short-peek".as_ptr(), 0) };
        assert!(fd >= 0);
        // SAFETY: a fresh descriptor nothing else owns.
        let memfd = unsafe { std::fs::File::from_raw_fd(fd) };
        let (a, b) = UnixStream::pair().unwrap();
        a.send_with_fds(&[&[5u8, 0, 0, 0, 1][..]], &[memfd.as_raw_fd(); 2])
            .unwrap();
        drop(a);
        drop(memfd);
        assert_eq!(open(), 0, "only the socket holds them");
        assert_eq!(peek_message(b.as_raw_fd()), None);
        assert_eq!(open(), 0, "a peeked duplicate was left open");
    }

    /// A test port (not attached to a switch).
    fn port(name: &str) -> Arc<VmPort> {
        crate::port::vm_port::tests::port(name, 1)
    }

    /// One vhost-user message: header (`code`, version 1 and `flags`) and
    /// `payload`, with `fds` on it.
    fn send(front: &UnixStream, code: u32, flags: u32, payload: &[u8], fds: &[i32]) {
        use vmm_sys_util::sock_ctrl_msg::ScmSocket;
        let mut m = Vec::new();
        m.extend(code.to_le_bytes());
        m.extend((0x1 | flags).to_le_bytes());
        m.extend((payload.len() as u32).to_le_bytes());
        m.extend(payload);
        front.send_with_fds(&[&m[..]], fds).unwrap();
    }

    /// The next message from the backend: (code, flags, payload), or
    /// `None` when it closed the connection or sent nothing in a second
    /// (a frontend would hang).
    fn answer(front: &UnixStream) -> Option<(u32, u32, Vec<u8>)> {
        use std::io::Read;
        front
            .set_read_timeout(Some(std::time::Duration::from_secs(1)))
            .unwrap();
        let mut h = [0u8; 12];
        (&*front).read_exact(&mut h).ok()?;
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let mut p = vec![0u8; word(8) as usize];
        (&*front).read_exact(&mut p).ok()?;
        Some((word(0), word(4), p))
    }

    /// Issue 36, finding 7: `ADD_MEM_REG` with no descriptor or with two,
    /// and `NEED_REPLY`. The `vhost` crate refuses it before asking the
    /// backend and sends no ack; the frontend waited for ever. Now it
    /// gets an error ack and the connection goes on. `REM_MEM_REG` with
    /// descriptors (the crate closes them) is answered as well.
    #[test]
    fn add_mem_reg_with_no_or_two_descriptors_gets_an_error_ack() {
        use vhost::vhost_user::message::VhostUserProtocolFeatures as P;
        const NEED_REPLY: u32 = 0x8;
        let (front, back) = UnixStream::pair().unwrap();
        let conn = Arc::new(Mutex::new(Connection::new(port("addmem"))));
        let mut requests = RequestStream::new(back, conn);
        let serve = |requests: &mut RequestStream| requests.serve_next("addmem");
        // GET_FEATURES, then REPLY_ACK and memory slots.
        send(&front, 1, 0, &[], &[]);
        assert!(serve(&mut requests));
        assert_eq!(answer(&front).unwrap().0, 1);
        let protocol = (P::REPLY_ACK | P::CONFIGURE_MEM_SLOTS).bits();
        send(&front, 16, 0, &protocol.to_le_bytes(), &[]);
        assert!(serve(&mut requests));
        // One region of 1 MiB at gpa 0 (8 bytes of padding first).
        let mut region = vec![0u8; 8];
        for v in [0u64, 1 << 20, 0x7f00_0000_0000, 0] {
            region.extend(v.to_le_bytes());
        }
        let memfd = super::super::memory_file::tests::memfd(1 << 20, true);
        let fd = memfd.as_raw_fd();
        for fds in [&[][..], &[fd, fd][..]] {
            send(&front, 37, NEED_REPLY, &region, fds);
            assert!(
                serve(&mut requests),
                "{} fds: the connection goes on",
                fds.len()
            );
            let (code, flags, payload) = answer(&front).expect("an answer, not a hang");
            assert_eq!((code, flags & 0x4), (37, 0x4), "a reply to ADD_MEM_REG");
            assert_ne!(payload, 0u64.to_le_bytes(), "{} fds: an error", fds.len());
        }
        for fds in [&[][..], &[fd, fd][..]] {
            send(&front, 38, NEED_REPLY, &region, fds);
            assert!(serve(&mut requests));
            let (code, _, payload) = answer(&front).expect("an answer, not a hang");
            assert_eq!(code, 38);
            assert_ne!(payload, 0u64.to_le_bytes(), "no such region");
        }
        // Still in step: GET_FEATURES gets its reply.
        send(&front, 1, 0, &[], &[]);
        assert!(serve(&mut requests));
        assert_eq!(answer(&front).unwrap().0, 1);
    }

    /// Issue 36, finding 6: the limit of refusal lines is the port's, not
    /// the connection's: a frontend that reconnects after each refusal
    /// gets no more lines than one that stays.
    #[test]
    fn refusal_lines_are_limited_across_connections() {
        let port = port("reconnects");
        let started = std::time::Instant::now();
        for _ in 0..200 {
            let (front, back) = UnixStream::pair().unwrap();
            let conn = Arc::new(Mutex::new(Connection::new(Arc::clone(&port))));
            let mut requests = RequestStream::new(back, conn);
            // SET_FEATURES with bits never offered: refused, answered
            // (an ack is owed only with NEED_REPLY), the connection goes on.
            for _ in 0..20 {
                send(&front, 2, 0, &u64::MAX.to_le_bytes(), &[]);
                assert!(requests.serve_next("reconnects"));
            }
        }
        let elapsed = started.elapsed();
        let bound = crate::log_limit::peer_lines_bound(elapsed);
        let (written, held_back) = port.log_totals(REFUSED);
        assert_eq!(written + held_back, 4000);
        assert!(written <= bound, "{written} lines in {elapsed:?}");
        let (written, _) = port.log_totals("features never offered");
        assert!(written <= bound, "{written} lines in {elapsed:?}");
    }
}
