//! The runtime of the daemon's local servers (control socket, metrics
//! endpoint): one small single-threaded tokio runtime per server thread, so
//! that any number of slow or idle clients costs a task each, never a
//! blocked thread, and the server stops when the daemon's stop flag is set.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often a server looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);

/// The daemon's stop flag, as a server task sees it.
#[derive(Clone, Debug)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    /// `fut`'s output, or `None` once the daemon is stopping.
    pub async fn until_stopped<F: Future>(&self, fut: F) -> Option<F::Output> {
        let stopped = async {
            while !self.0.load(Ordering::Relaxed) {
                tokio::time::sleep(STOP_POLL).await;
            }
        };
        tokio::select! {
            out = fut => Some(out),
            () = stopped => None,
        }
    }
}

/// Run `server` on a new single-threaded runtime on this thread until it
/// returns (it should, once [`StopFlag::until_stopped`] says so). Tasks
/// still open then (client connections) are dropped with the runtime.
pub fn run<F, Fut>(name: &'static str, stop: &Arc<AtomicBool>, server: F)
where
    F: FnOnce(StopFlag) -> Fut,
    Fut: Future<Output = ()>,
{
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(server = name, error = %e, "cannot start the server's runtime");
            return;
        }
    };
    rt.block_on(server(StopFlag(Arc::clone(stop))));
}
