//! The one bounded reader of line-delimited JSON from an untrusted peer,
//! shared by the QMP and guest-agent clients.
//!
//! Every line is read against a deadline that covers all its reads, so a
//! peer that trickles bytes, or never ends its line, times out as surely as
//! one that says nothing; a line longer than the limit is refused without
//! being read to its end. What a line means is the caller's business. A
//! line cut short by a deadline is kept and completed by the next read, so
//! a server can wait in short slices (to notice its own stop) without
//! losing a slow client's line.

use std::io::{self, BufRead, BufReader, ErrorKind};
use std::os::unix::net::UnixStream;
use std::time::Instant;

/// Reading one line failed.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    /// Setting the socket's read timeout failed.
    #[error("failed to set the socket's read timeout")]
    SetTimeout(#[source] io::Error),
    /// Reading failed for a reason other than a timeout.
    #[error("failed to read from the socket")]
    Read(#[source] io::Error),
    /// The deadline passed before the line was complete.
    #[error("no complete line before the deadline")]
    Timeout,
    /// The peer closed the socket before the line was complete.
    #[error("the peer closed the socket")]
    Closed,
    /// The line was longer than the limit; it was not read to its end.
    #[error("a line exceeded {limit} bytes")]
    TooLong {
        /// The limit, bytes.
        limit: usize,
    },
}

/// Reads lines of at most `max_line` bytes from a socket, each before a
/// deadline. See the module documentation.
#[derive(Debug)]
pub struct JsonLines {
    reader: BufReader<UnixStream>,
    max_line: usize,
    /// The line read so far, when a deadline cut it short.
    partial: Vec<u8>,
}

impl JsonLines {
    /// Lines from `stream`, each at most `max_line` bytes (without its end).
    pub fn new(stream: UnixStream, max_line: usize) -> JsonLines {
        JsonLines {
            reader: BufReader::new(stream),
            max_line,
            partial: Vec::new(),
        }
    }

    /// The socket, to write to or to ask about its peer.
    pub fn stream(&self) -> &UnixStream {
        self.reader.get_ref()
    }

    /// The socket, mutably (writes).
    pub fn stream_mut(&mut self) -> &mut UnixStream {
        self.reader.get_mut()
    }

    /// The most bytes a line may have.
    pub fn max_line(&self) -> usize {
        self.max_line
    }

    /// The next line, without its `\n`, complete before `deadline`.
    pub fn read_line(&mut self, deadline: Instant) -> Result<Vec<u8>, LineError> {
        let line = &mut self.partial;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(LineError::Timeout);
            }
            self.reader
                .get_ref()
                .set_read_timeout(Some(remaining))
                .map_err(LineError::SetTimeout)?;
            let buf = match self.reader.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(LineError::Timeout);
                }
                Err(e) => return Err(LineError::Read(e)),
            };
            if buf.is_empty() {
                return Err(LineError::Closed);
            }
            let (take, complete) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i, true),
                None => (buf.len(), false),
            };
            if line.len() + take > self.max_line {
                return Err(LineError::TooLong {
                    limit: self.max_line,
                });
            }
            line.extend_from_slice(&buf[..take]);
            self.reader.consume(if complete { take + 1 } else { take });
            if complete {
                return Ok(std::mem::take(line));
            }
        }
    }

    /// The next line that is not blank, as [`JsonLines::read_line`].
    pub fn read_message(&mut self, deadline: Instant) -> Result<Vec<u8>, LineError> {
        loop {
            let line = self.read_line(deadline)?;
            if !line.trim_ascii().is_empty() {
                return Ok(line);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;

    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(300)
    }

    #[test]
    fn lines_blank_lines_and_the_peers_end() {
        let (mut peer, ours) = UnixStream::pair().unwrap();
        let mut r = JsonLines::new(ours, 64);
        peer.write_all(b"{\"a\": 1}\r\n\n  \n{\"b\"").unwrap();
        assert_eq!(r.read_line(soon()).unwrap(), b"{\"a\": 1}\r");
        assert!(matches!(r.read_message(soon()), Err(LineError::Timeout)));
        // The line a deadline cut short is completed by the next read.
        peer.write_all(b": 2}\n").unwrap();
        assert_eq!(r.read_message(soon()).unwrap(), b"{\"b\": 2}");
        drop(peer);
        assert!(matches!(r.read_line(soon()), Err(LineError::Closed)));
    }

    #[test]
    fn a_long_line_is_refused_unread_and_a_trickle_times_out() {
        let (mut peer, ours) = UnixStream::pair().unwrap();
        let mut r = JsonLines::new(ours, 8);
        peer.write_all(b"123456789\n").unwrap();
        assert!(matches!(
            r.read_line(soon()),
            Err(LineError::TooLong { limit: 8 })
        ));
        let (mut peer, ours) = UnixStream::pair().unwrap();
        let mut r = JsonLines::new(ours, 1 << 20);
        let writer = std::thread::spawn(move || {
            for _ in 0..100 {
                if peer.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        assert!(matches!(r.read_line(soon()), Err(LineError::Timeout)));
        drop(r);
        writer.join().unwrap();
    }
}
