//! An error and its causes in one line, for the reasons this crate hands
//! back as strings (unavailable features, per-thread outcomes).

/// `e` and its causes, `: `-separated ("failed to read x: No such file").
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("failed to read x")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn joins_causes() {
        let e = Outer(std::io::Error::other("disk on fire"));
        assert_eq!(error_chain(&e), "failed to read x: disk on fire");
    }
}
