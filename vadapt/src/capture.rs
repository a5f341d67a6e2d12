//! `vadapt capture`: ask the daemon for a port's capture, and copy the
//! pcapng stream it answers with into a file or onto stdout.
//!
//! The daemon writes the pcapng (`vadapt_dataplane::capture_stream`); this
//! side copies it as it comes, flushing each piece, so that `-w -` feeds
//! `tcpdump -r -` live. Ctrl-C (or SIGTERM) shuts down this side of the
//! connection: the daemon then ends the capture, writes its statistics
//! block, and closes, and the file ends complete. On the way the copy
//! counts the stream's packet blocks and reads its statistics block, for
//! the summary line on stderr.

use crate::cli::{CaptureArgs, CaptureDirArg};
use crate::exit::{chain, fail};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vadapt_dataplane::capture_stream::CaptureSpec;
use vadapt_dataplane::control::{ControlError, Request, Response};
use vadapt_dataplane::switch::CaptureDir;

/// Longest the daemon may take to answer the request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the copy looks at the stop signals while the stream is quiet.
const STOP_CHECK: Duration = Duration::from_millis(200);
/// Longest the copy waits for the stream's end after Ctrl-C.
const END_TIMEOUT: Duration = Duration::from_secs(10);

/// `vadapt capture`.
pub fn capture(a: CaptureArgs) -> ExitCode {
    let duration_ms = match a.duration {
        None => None,
        Some(s) if s.is_finite() && s > 0.0 && s < 1e9 => Some((s * 1000.0).ceil() as u64),
        Some(s) => return fail(format!("--duration {s}: not a number of seconds > 0")),
    };
    let spec = CaptureSpec {
        port: a.port.clone(),
        dir: match a.dir {
            CaptureDirArg::Rx => CaptureDir::Rx,
            CaptureDirArg::Tx => CaptureDir::Tx,
            CaptureDirArg::Both => CaptureDir::Both,
        },
        queue: a.queue,
        snaplen: a.snaplen,
        count: a.count,
        duration_ms,
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            return fail(format!("cannot handle signal {sig}: {e}"));
        }
    }
    let (conn, mut answer) = match start(&a, &spec) {
        Ok(started) => started,
        Err(exit) => return exit,
    };
    let to_stdout = a.write.as_os_str() == "-";
    let mut out: Box<dyn Write> = if to_stdout {
        Box::new(std::io::stdout().lock())
    } else {
        match File::create(&a.write) {
            Ok(f) => Box::new(f),
            Err(e) => return fail(format!("cannot create {}: {e}", a.write.display())),
        }
    };
    eprintln!(
        "vadapt: capturing {} ({}), snap length {} bytes; Ctrl-C ends it",
        a.port,
        dir_words(a.dir),
        a.snaplen
    );
    let mut counter = BlockCounter::default();
    let copied = copy(&conn, &mut answer, &mut out, &mut counter, &stop);
    let flushed = out.flush();
    match (copied, flushed) {
        (Ok(()), Ok(())) => {}
        (Err(e), _) | (_, Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        (Err(e), _) | (_, Err(e)) => return fail(format!("capture broke off: {e}")),
    }
    let where_to = if to_stdout {
        "stdout".to_string()
    } else {
        a.write.display().to_string()
    };
    match counter.dropped {
        Some(dropped) => eprintln!(
            "vadapt: {} frame(s) captured to {where_to}; {dropped} dropped by the capture \
             (its writer behind)",
            counter.packets
        ),
        None => eprintln!(
            "vadapt: {} frame(s) captured to {where_to}; the stream ended without its \
             statistics (the daemon went away?)",
            counter.packets
        ),
    }
    ExitCode::SUCCESS
}

fn dir_words(d: CaptureDirArg) -> &'static str {
    match d {
        CaptureDirArg::Rx => "frames it receives from its VM",
        CaptureDirArg::Tx => "frames handed to it for its VM",
        CaptureDirArg::Both => "both ways",
    }
}

/// Send the request; the connection and its reader past the answer line,
/// or the exit (the daemon's refusal printed).
fn start(
    a: &CaptureArgs,
    spec: &CaptureSpec,
) -> Result<(UnixStream, BufReader<UnixStream>), ExitCode> {
    let failed = |e: ControlError| fail(chain(&e));
    let io = |e: std::io::Error| failed(ControlError::Io(e));
    let mut conn = UnixStream::connect(&a.control).map_err(|source| {
        failed(ControlError::Connect {
            path: a.control.clone(),
            source,
        })
    })?;
    conn.set_read_timeout(Some(ANSWER_TIMEOUT)).map_err(io)?;
    let req = Request::Capture { spec: spec.clone() };
    let mut line = serde_json::to_string(&req).map_err(|e| failed(e.into()))?;
    line.push('\n');
    conn.write_all(line.as_bytes()).map_err(io)?;
    let mut reader = BufReader::new(conn.try_clone().map_err(io)?);
    let mut answer = String::new();
    (&mut reader)
        .take(64 * 1024)
        .read_line(&mut answer)
        .map_err(io)?;
    match serde_json::from_str::<Response>(&answer) {
        Ok(Response::Capturing { .. }) => {}
        Ok(Response::Error { error }) => return Err(fail(error)),
        Ok(other) => return Err(fail(format!("unexpected answer {other:?}"))),
        Err(e) => return Err(failed(e.into())),
    }
    conn.set_read_timeout(Some(STOP_CHECK)).map_err(io)?;
    Ok((conn, reader))
}

/// Copy the stream from `from` (reading `conn`) to `out` until it ends;
/// once `stop` is set, shut down the sending side and read on to the end
/// (at most [`END_TIMEOUT`]).
fn copy(
    conn: &UnixStream,
    from: &mut impl Read,
    out: &mut dyn Write,
    counter: &mut BlockCounter,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 1 << 16];
    let mut stopped_at = None;
    loop {
        if stopped_at.is_none() && stop.load(Ordering::Relaxed) {
            conn.shutdown(Shutdown::Write)?;
            stopped_at = Some(Instant::now());
        }
        if stopped_at.is_some_and(|t| t.elapsed() > END_TIMEOUT) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the daemon did not end the capture",
            ));
        }
        match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                counter.feed(&buf[..n]);
                out.write_all(&buf[..n])?;
                out.flush()?;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Counts a pcapng stream's packet blocks as it passes, and reads its
/// interface statistics block's drop count (the daemon's stream is in
/// this host's byte order).
#[derive(Debug, Default)]
struct BlockCounter {
    /// The current block's first bytes (its type and length).
    head: Vec<u8>,
    /// Bytes of the current block still to come after `head`.
    left: usize,
    /// The statistics block's body, while it comes.
    stats: Option<Vec<u8>>,
    /// Enhanced packet blocks seen.
    packets: u64,
    /// `isb_ifdrop` of the last statistics block.
    dropped: Option<u64>,
}

/// pcapng block types this reads.
const EPB: u32 = 6;
const ISB: u32 = 5;
/// `isb_ifdrop`'s option code.
const ISB_IFDROP: u16 = 5;

impl BlockCounter {
    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.left == 0 {
                let need = 8 - self.head.len();
                let n = need.min(bytes.len());
                self.head.extend_from_slice(&bytes[..n]);
                bytes = &bytes[n..];
                if self.head.len() < 8 {
                    return;
                }
                let kind = u32::from_ne_bytes(self.head[..4].try_into().expect("4 bytes"));
                let len = u32::from_ne_bytes(self.head[4..8].try_into().expect("4 bytes"));
                self.left = (len as usize).saturating_sub(8);
                self.head.clear();
                self.packets += u64::from(kind == EPB);
                self.stats = (kind == ISB).then(Vec::new);
                continue;
            }
            let n = self.left.min(bytes.len());
            if let Some(s) = &mut self.stats {
                s.extend_from_slice(&bytes[..n]);
            }
            self.left -= n;
            bytes = &bytes[n..];
            if self.left == 0 {
                if let Some(body) = self.stats.take() {
                    self.dropped = ifdrop(&body).or(self.dropped);
                }
            }
        }
    }
}

/// `isb_ifdrop` from a statistics block's body (after type and length):
/// interface id (4), timestamp (8), then options, each a code, a length
/// and its value padded to 4 bytes.
fn ifdrop(body: &[u8]) -> Option<u64> {
    let mut opts = body.get(12..)?;
    while opts.len() >= 4 {
        let code = u16::from_ne_bytes([opts[0], opts[1]]);
        let len = usize::from(u16::from_ne_bytes([opts[2], opts[3]]));
        let value = opts.get(4..4 + len)?;
        if code == ISB_IFDROP && len == 8 {
            return Some(u64::from_ne_bytes(value.try_into().ok()?));
        }
        if code == 0 {
            return None;
        }
        opts = opts.get(4 + len.div_ceil(4) * 4..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(kind: u32, body: &[u8]) -> Vec<u8> {
        let len = (12 + body.len()) as u32;
        let mut b = kind.to_ne_bytes().to_vec();
        b.extend_from_slice(&len.to_ne_bytes());
        b.extend_from_slice(body);
        b.extend_from_slice(&len.to_ne_bytes());
        b
    }

    #[test]
    fn packets_and_drops_are_read_from_a_stream_in_any_pieces() {
        let mut isb = vec![0u8; 12];
        for (code, v) in [(4u16, 9u64), (ISB_IFDROP, 3)] {
            isb.extend_from_slice(&code.to_ne_bytes());
            isb.extend_from_slice(&8u16.to_ne_bytes());
            isb.extend_from_slice(&v.to_ne_bytes());
        }
        isb.extend_from_slice(&[0; 4]); // opt_endofopt
        let mut stream = block(0x0a0d0d0a, &[0; 16]);
        stream.extend(block(1, &[0; 8]));
        for _ in 0..3 {
            stream.extend(block(EPB, &[0; 40]));
        }
        stream.extend(block(ISB, &isb));
        for piece in [1, 3, 7, stream.len()] {
            let mut c = BlockCounter::default();
            for chunk in stream.chunks(piece) {
                c.feed(chunk);
            }
            assert_eq!((c.packets, c.dropped), (3, Some(3)), "pieces of {piece}");
        }
    }
}
