//! The text of a panic, for logs: what `panic!` was given when it was a
//! string (the usual case), else a fixed placeholder.

use std::any::Any;

/// The message a panic carried (`&str` or `String` payloads; anything else
/// is named as such).
pub fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(a panic without a text message)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_formatted_and_other_payloads() {
        let literal = std::panic::catch_unwind(|| panic!("plain")).unwrap_err();
        assert_eq!(panic_message(&*literal), "plain");
        let n = 7;
        let formatted = std::panic::catch_unwind(|| panic!("got {n}")).unwrap_err();
        assert_eq!(panic_message(&*formatted), "got 7");
        let other = std::panic::catch_unwind(|| std::panic::panic_any(42u8)).unwrap_err();
        assert_eq!(panic_message(&*other), "(a panic without a text message)");
    }
}
