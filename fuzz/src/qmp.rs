//! QEMU's side of a QMP connection into the core manager's client
//! ([`QmpClient`]): the input is everything "QEMU" sends (greeting,
//! replies, events, garbage), written into one end of a
//! `UnixStream::pair()` before the client starts on the other, that end's
//! sending side then shut down. The client makes the exchanges the core
//! manager makes: connect ([`QmpClient::from_stream`]: greeting,
//! `qmp_capabilities`), `query-cpus-fast`, then `stop` and `cont` on the
//! same connection. In-process, one thread, no waiting: every read ends at
//! the end of the input.
//!
//! The first byte of an input picks the longest message accepted
//! ([`QmpLimits::max_line`]: 16 bytes to 64 KiB; the daemon's 1 MiB would
//! never be reached by an input this size), the rest is the stream.
//! Checked beyond "no crash, no hang": no error is a timeout (the input's
//! end is an end, never a wait); a line-too-long error only with that much
//! input; a peer's text in an error is cut to its excerpt; `query-cpus-fast`
//! comes back sorted; once the client calls itself unusable it refuses
//! every command.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::Duration;
use vadapt_qemu::qmp::{QmpClient, QmpError, QmpLimits};

/// Most stream bytes per input: what the socket's buffer takes at once
/// (the harness writes it all before the client reads).
pub const MAX_STREAM: usize = 64 << 10;

/// The longest excerpt of a peer's line in an error: 200 bytes of it,
/// escaped (each byte at most `MAX_ESCAPED_PER_BYTE` bytes).
const MAX_EXCERPT: usize = 200 * vadapt_qemu::peer_text::MAX_ESCAPED_PER_BYTE;

/// Check one error of an exchange; whether the client stays usable.
fn check(e: &QmpError, stream_len: usize) -> bool {
    let text = e.to_string();
    match e {
        QmpError::Timeout { .. } => panic!("a wait at the end of the input: {text}"),
        QmpError::LineTooLong { limit } => {
            assert!(stream_len > *limit, "{text} with {stream_len} bytes in all")
        }
        QmpError::Malformed { line, .. }
        | QmpError::NoGreeting { line }
        | QmpError::UnexpectedMessage { line, .. } => {
            assert!(line.len() <= MAX_EXCERPT, "excerpt of {} bytes", line.len());
            assert!(!line.chars().any(char::is_control), "unescaped: {line:?}");
            assert!(!line.chars().any(char::is_control), "unescaped: {line:?}")
        }
        _ => {}
    }
    matches!(
        e,
        QmpError::CommandFailed { .. } | QmpError::ParseReply { .. }
    )
}

/// Run one input (see the module docs).
pub fn run(data: &[u8]) {
    let Some((&mode, stream)) = data.split_first() else {
        return;
    };
    let stream = &stream[..stream.len().min(MAX_STREAM)];
    let limits = QmpLimits {
        timeout: Duration::from_secs(2),
        max_line: 16 << (mode % 13),
    };
    let (ours, qemu) = UnixStream::pair().expect("socketpair");
    (&qemu)
        .write_all(stream)
        .expect("the input fits the socket's buffer");
    qemu.shutdown(std::net::Shutdown::Write).expect("shutdown");
    let mut client = match QmpClient::from_stream(ours, limits) {
        Ok(c) => c,
        Err(e) => {
            check(&e, stream.len());
            return;
        }
    };
    let mut usable = match client.query_cpus_fast() {
        Ok(cpus) => {
            assert!(
                cpus.windows(2).all(|w| w[0] <= w[1]),
                "not sorted: {cpus:?}"
            );
            true
        }
        Err(e) => check(&e, stream.len()),
    };
    for command in ["stop", "cont"] {
        match client.execute(command) {
            Ok(_) => assert!(usable, "`{command}` answered by an unusable client"),
            Err(QmpError::Unusable) => assert!(!usable, "`{command}` refused by a usable client"),
            Err(e) => {
                assert!(usable, "`{command}`: {e} from an unusable client");
                usable = check(&e, stream.len());
            }
        }
    }
    // `qemu` (still open) and the client's end close here.
    drop(qemu);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seeds get through the whole exchange.
    #[test]
    fn seeds_reach_every_command() {
        let _one = crate::tests::serial();
        for seed in [
            &include_bytes!("../seeds/qmp/query-cpus-fast")[..],
            include_bytes!("../seeds/qmp/events-and-errors"),
        ] {
            run(seed);
            let stream = &seed[1..];
            let (ours, qemu) = UnixStream::pair().unwrap();
            (&qemu).write_all(stream).unwrap();
            qemu.shutdown(std::net::Shutdown::Write).unwrap();
            let limits = QmpLimits {
                timeout: Duration::from_secs(2),
                max_line: 16 << (seed[0] % 13),
            };
            let mut c = QmpClient::from_stream(ours, limits).unwrap();
            let cpus = c.query_cpus_fast().unwrap();
            assert_eq!(cpus.len(), 2);
            assert!(cpus[0].cpu_index < cpus[1].cpu_index);
            c.execute("stop").unwrap();
            // `cont`: the stream's end (QEMU closed the socket), or refused.
            assert!(matches!(
                c.execute("cont"),
                Err(QmpError::Closed { .. } | QmpError::CommandFailed { .. })
            ));
        }
    }
}
