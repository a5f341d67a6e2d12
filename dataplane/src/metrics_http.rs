//! The Prometheus scrape endpoint: `GET` or `HEAD` on `/metrics` (or `/`).
//!
//! The format follows the request's `Accept` header the way Prometheus
//! negotiates it: OpenMetrics 1.0.0 when the client ranks
//! `application/openmetrics-text` above `text/plain`, otherwise the
//! Prometheus text format 0.0.4 (also for clients that send no `Accept`,
//! such as curl).

use crate::metrics::Registry;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `Content-Type` of the Prometheus text format 0.0.4.
pub const TEXT_004: &str = "text/plain; version=0.0.4; charset=utf-8";
/// `Content-Type` of OpenMetrics 1.0.0 text.
pub const OPENMETRICS_100: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The exposition format a scrape gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Text004,
    /// OpenMetrics 1.0.0 text format.
    OpenMetrics,
}

impl Format {
    /// The `Content-Type` header value.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text004 => TEXT_004,
            Format::OpenMetrics => OPENMETRICS_100,
        }
    }
}

/// Choose the format from an `Accept` header value (RFC 9110 media ranges
/// with `q` weights). OpenMetrics only when its weight is above every range
/// that admits the text format (`text/plain`, `text/*`, `*/*`); ties go to
/// the text format.
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Text004;
    };
    let (mut om, mut text) = (0.0f32, 0.0f32);
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let mut q = 1.0f32;
        for p in parts {
            if let Some(v) = p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")) {
                q = v.parse().unwrap_or(0.0);
            }
        }
        match media.as_str() {
            "application/openmetrics-text" => om = om.max(q),
            "text/plain" | "text/*" | "*/*" => text = text.max(q),
            _ => {}
        }
    }
    if om > 0.0 && om > text {
        Format::OpenMetrics
    } else {
        Format::Text004
    }
}

/// A parsed request head: method, path and the `Accept` header.
#[derive(Debug, PartialEq, Eq)]
struct RequestHead {
    method: String,
    path: String,
    accept: Option<String>,
}

/// The longest request head read (request line and headers).
const MAX_HEAD: u64 = 8192;

fn read_head(s: &TcpStream) -> Option<RequestHead> {
    let mut r = BufReader::new(Read::take(s, MAX_HEAD));
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut it = line.split_whitespace();
    let (method, path) = (it.next()?.to_string(), it.next()?.to_string());
    let mut accept = None;
    loop {
        line.clear();
        if r.read_line(&mut line).ok()? == 0 {
            break;
        }
        let h = line.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.trim().eq_ignore_ascii_case("accept") {
                accept = Some(v.trim().to_string());
            }
        }
    }
    Some(RequestHead {
        method,
        path,
        accept,
    })
}

/// The full response (head and body) to one request.
fn respond(head: &RequestHead, reg: &Arc<Registry>) -> Vec<u8> {
    let path = head.path.split('?').next().unwrap_or("");
    let is_head = head.method == "HEAD";
    let (status, ctype, body) = if head.method != "GET" && !is_head {
        (
            "405 Method Not Allowed",
            TEXT_004,
            "GET or HEAD\n".to_string(),
        )
    } else if path == "/metrics" || path == "/" {
        let f = negotiate(head.accept.as_deref());
        let body = match f {
            Format::Text004 => reg.prometheus_text(),
            Format::OpenMetrics => reg.openmetrics_text(),
        };
        ("200 OK", f.content_type(), body)
    } else {
        ("404 Not Found", TEXT_004, "try /metrics\n".to_string())
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
        body.len(),
        if status.starts_with("405") {
            "Allow: GET, HEAD\r\n"
        } else {
            ""
        }
    )
    .into_bytes();
    if !is_head {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

/// Serve scrapes on `l` (non-blocking) until `stop` is set.
pub fn serve(l: TcpListener, reg: Arc<Registry>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((mut s, _)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
                if let Some(head) = read_head(&s) {
                    let _ = s.write_all(&respond(&head, &reg));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::PortStats;

    #[test]
    fn negotiation_follows_the_weights() {
        assert_eq!(negotiate(None), Format::Text004);
        assert_eq!(negotiate(Some("*/*")), Format::Text004);
        // What Prometheus 2.x sends by default.
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(Some(prom)), Format::OpenMetrics);
        // Prometheus with OpenMetrics scraping disabled.
        assert_eq!(
            negotiate(Some("text/plain;version=0.0.4;q=1,*/*;q=0.1")),
            Format::Text004
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text;q=0.2, text/plain;q=0.5")),
            Format::Text004
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text;q=0")),
            Format::Text004
        );
    }

    fn reg() -> Arc<Registry> {
        let reg = Arc::new(Registry::default());
        reg.add_port(Arc::new(PortStats::new("vm1", "vm", 1)));
        reg
    }

    fn head(method: &str, path: &str, accept: Option<&str>) -> RequestHead {
        RequestHead {
            method: method.into(),
            path: path.into(),
            accept: accept.map(String::from),
        }
    }

    #[test]
    fn head_gets_the_headers_of_get_without_a_body() {
        let r = reg();
        let get = String::from_utf8(respond(&head("GET", "/metrics", None), &r)).unwrap();
        let hd = String::from_utf8(respond(&head("HEAD", "/metrics", None), &r)).unwrap();
        assert!(get.starts_with("HTTP/1.1 200 OK\r\n"), "{get}");
        assert!(hd.starts_with("HTTP/1.1 200 OK\r\n"), "{hd}");
        let (get_head, body) = get.split_once("\r\n\r\n").unwrap();
        assert_eq!(format!("{get_head}\r\n\r\n"), hd);
        assert!(get_head.contains(&format!("Content-Length: {}", body.len())));
        assert!(get_head.contains(TEXT_004));
        assert!(!body.contains("# EOF"));
    }

    #[test]
    fn openmetrics_when_asked_and_errors_for_the_rest() {
        let r = reg();
        let om = String::from_utf8(respond(
            &head("GET", "/metrics", Some("application/openmetrics-text")),
            &r,
        ))
        .unwrap();
        assert!(om.contains(OPENMETRICS_100), "{om}");
        assert!(om.ends_with("# EOF\n"), "{om}");
        let nf = String::from_utf8(respond(&head("GET", "/nope", None), &r)).unwrap();
        assert!(nf.starts_with("HTTP/1.1 404"), "{nf}");
        let na = String::from_utf8(respond(&head("POST", "/metrics", None), &r)).unwrap();
        assert!(na.starts_with("HTTP/1.1 405"), "{na}");
        assert!(na.contains("Allow: GET, HEAD"), "{na}");
    }
}
