//! The Prometheus scrape endpoint: `GET` or `HEAD` on `/metrics` (or `/`),
//! served by hyper on the daemon's local-server runtime.
//!
//! The format follows the request's `Accept` header the way Prometheus
//! negotiates it: OpenMetrics 1.0.0 when the client ranks
//! `application/openmetrics-text` above `text/plain`, otherwise the
//! Prometheus text format 0.0.4 (also for clients that send no `Accept`,
//! such as curl).

use super::registry::Registry;
use crate::conn_limit::ConnLimit;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::TcpListener;
use std::sync::atomic::AtomicBool;
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

/// A request as far as the endpoint cares: method, path and `Accept`.
#[derive(Debug, PartialEq, Eq)]
struct RequestHead {
    method: String,
    path: String,
    accept: Option<String>,
}

/// The response (status, content type, body) to one request; `HEAD` gets
/// the headers of `GET` with an empty body.
fn respond(head: &RequestHead, reg: &Arc<Registry>) -> (u16, &'static str, String) {
    let path = head.path.split('?').next().unwrap_or("");
    let is_head = head.method == "HEAD";
    let (status, ctype, body) = if head.method != "GET" && !is_head {
        (405, TEXT_004, "GET or HEAD\n".to_string())
    } else if path == "/metrics" || path == "/" {
        let f = negotiate(head.accept.as_deref());
        let body = match f {
            Format::Text004 => reg.prometheus_text(),
            Format::OpenMetrics => reg.openmetrics_text(),
        };
        (200, f.content_type(), body)
    } else {
        (404, TEXT_004, "try /metrics\n".to_string())
    };
    (status, ctype, body)
}

/// Most scrape connections open at once (see [`ConnLimit`]).
pub const MAX_CONNECTIONS: usize = 64;
/// Longest a client may take to send a request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a connection lives (a keep-alive scraper reconnects after it).
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

async fn handle(
    req: hyper::Request<hyper::body::Incoming>,
    reg: Arc<Registry>,
) -> Result<hyper::Response<Full<Bytes>>, std::convert::Infallible> {
    let head = RequestHead {
        method: req.method().as_str().to_string(),
        path: req.uri().path().to_string(),
        accept: req
            .headers()
            .get(hyper::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
    };
    let (status, ctype, body) = respond(&head, &reg);
    let len = body.len();
    let body = if head.method == "HEAD" {
        Bytes::new()
    } else {
        Bytes::from(body)
    };
    let mut resp = hyper::Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, ctype)
        .header(hyper::header::CONTENT_LENGTH, len);
    if status == 405 {
        resp = resp.header(hyper::header::ALLOW, "GET, HEAD");
    }
    // Only fixed, valid header values above: building cannot fail.
    Ok(resp.body(Full::new(body)).unwrap_or_default())
}

/// Serve scrapes on `l` until `stop` is set: HTTP/1.1 by hyper, each
/// connection a task with a header timeout and a lifetime, at most
/// [`MAX_CONNECTIONS`] at once (the oldest is closed to make room).
pub fn serve(l: TcpListener, reg: Arc<Registry>, stop: Arc<AtomicBool>) {
    crate::local_server::run("metrics", &stop, |stop| async move {
        let listener = match tokio::net::TcpListener::from_std(l) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "metrics listener unusable");
                return;
            }
        };
        let limit = ConnLimit::new("metrics", MAX_CONNECTIONS);
        while let Some(accepted) = stop.until_stopped(listener.accept()).await {
            let stream = match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics accept failed");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let reg = Arc::clone(&reg);
            limit.spawn(async move {
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(
                        TokioIo::new(stream),
                        service_fn(move |req| handle(req, Arc::clone(&reg))),
                    );
                // A connection past its lifetime is simply closed.
                if let Ok(Err(e)) = tokio::time::timeout(CONNECTION_LIFETIME, conn).await {
                    tracing::debug!(error = %e, "metrics connection failed");
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::counters::PortStats;

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
        let (reg, counted) = crate::metrics::registry::test_utils::registry();
        counted.add_port(Arc::new(PortStats::new(
            "vm1",
            crate::metrics::port_kind::PortKind::Vm,
            1,
        )));
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
    fn paths_methods_and_formats() {
        let r = reg();
        let (st, ct, body) = respond(&head("GET", "/metrics", None), &r);
        assert_eq!((st, ct), (200, TEXT_004));
        assert!(!body.contains("# EOF"));
        let (st, ct, _) = respond(&head("HEAD", "/metrics", None), &r);
        assert_eq!((st, ct), (200, TEXT_004));
        let (st, ct, body) = respond(
            &head("GET", "/metrics", Some("application/openmetrics-text")),
            &r,
        );
        assert_eq!((st, ct), (200, OPENMETRICS_100));
        assert!(body.ends_with("# EOF\n"), "{body}");
        assert_eq!(respond(&head("GET", "/nope", None), &r).0, 404);
        assert_eq!(respond(&head("POST", "/metrics", None), &r).0, 405);
        assert_eq!(respond(&head("GET", "/?x=1", None), &r).0, 200);
    }

    /// A live endpoint: HEAD has GET's headers and no body; 200 idle
    /// connections held open do not keep a scrape from being answered.
    #[test]
    fn idle_clients_never_block_a_scrape() {
        use std::io::{Read, Write};
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (r, st) = (reg(), Arc::clone(&stop));
        let t = std::thread::spawn(move || serve(l, r, st));
        let idle: Vec<_> = (0..200)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let get = |req: &str| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            s.write_all(req.as_bytes()).unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        let g = get("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert!(g.starts_with("HTTP/1.1 200"), "{g}");
        let h = get("HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert!(h.starts_with("HTTP/1.1 200"), "{h}");
        let (gh, body) = g.split_once("\r\n\r\n").unwrap();
        assert!(gh
            .to_ascii_lowercase()
            .contains(&format!("content-length: {}", body.len())));
        assert!(h.ends_with("\r\n\r\n"), "HEAD has a body: {h}");
        drop(idle);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        t.join().unwrap();
    }
}
