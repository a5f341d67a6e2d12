//! Text from an untrusted peer, made safe to log: the one helper every
//! string from QMP, the guest agent, a frontend or the control socket goes
//! through before it reaches a log line or `vadapt cores`.
//!
//! A peer that can put a newline into a string the daemon logs can forge
//! whole log lines (`...\n2099-01-01T00:00:00Z ERROR forged: ...`), which
//! an operator's log pipeline would take as the daemon's own. [`PeerText`]
//! keeps such text in an escaped, length-capped form:
//!
//! - `\n`, `\r`, `\t` and `\\` become two-character escapes, so the escaped
//!   form is unambiguous;
//! - every other control character (C0, DEL, C1), the Unicode line and
//!   paragraph separators and the bidirectional overrides and isolates
//!   (which can reorder what a terminal shows) become `\u{XXXX}`;
//! - at most [`MAX_CHARS`] characters are kept; a cut is marked with how
//!   many bytes were left out.
//!
//! ```
//! use vadapt_qemu::peer_text::PeerText;
//!
//! let t = PeerText::new("refused\n2099-01-01T00:00:00Z ERROR forged");
//! assert_eq!(t.to_string(), r"refused\n2099-01-01T00:00:00Z ERROR forged");
//! assert!(!t.as_str().contains('\n'));
//! ```

use std::fmt;

/// Characters kept of one peer string; the rest is cut and counted.
pub const MAX_CHARS: usize = 256;

/// The most bytes one byte of peer text becomes when escaped: a control
/// byte is `\u{001b}`, a three-byte separator `\u{2028}`, a byte that is
/// not UTF-8 a three-byte replacement character. So `n` bytes of peer text
/// (under [`MAX_CHARS`]) are at most `n * MAX_ESCAPED_PER_BYTE` escaped.
pub const MAX_ESCAPED_PER_BYTE: usize = 8;

/// Text from a peer, escaped and capped (see the module documentation).
/// Its `Display` is safe to put into a log line as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PeerText(String);

impl PeerText {
    /// Escape and cap `raw`.
    pub fn new(raw: &str) -> PeerText {
        PeerText(escape(raw, MAX_CHARS))
    }

    /// Escape and cap `raw`, decoding it as UTF-8 with replacement
    /// characters where it is not.
    pub fn from_bytes(raw: &[u8]) -> PeerText {
        PeerText::new(&String::from_utf8_lossy(raw))
    }

    /// Escape and cap `path`: a socket path from a config file or from
    /// `vadapt add-port` (which the libvirt hook fills from a domain's XML)
    /// may hold a newline as any other byte. Bytes that are not UTF-8
    /// become replacement characters.
    pub fn from_path(path: &std::path::Path) -> PeerText {
        PeerText::new(&path.to_string_lossy())
    }

    /// The escaped text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PeerText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::ops::Deref for PeerText {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for PeerText {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for PeerText {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl From<&str> for PeerText {
    fn from(raw: &str) -> Self {
        PeerText::new(raw)
    }
}

/// Whether `c` must not reach a log line as it is.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `raw` escaped, with at most `max_chars` characters of it kept.
pub fn escape(raw: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(raw.len().min(max_chars * 2) + 2);
    for (kept, (at, c)) in raw.char_indices().enumerate() {
        if kept == max_chars {
            out.push_str(&format!("…[{} more bytes]", raw.len() - at));
            break;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\\' => out.push_str("\\\\"),
            c if is_unsafe(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newlines_and_controls_never_survive() {
        let forged = "no\r\n2099-01-01T00:00:00.000000Z ERROR forged-by-guest: x\u{1b}[2J\u{0}\u{85}\u{2028}\u{202e}";
        let t = PeerText::new(forged);
        assert_eq!(
            t.as_str(),
            r"no\r\n2099-01-01T00:00:00.000000Z ERROR forged-by-guest: x\u{001b}[2J\u{0000}\u{0085}\u{2028}\u{202e}"
        );
        assert!(!t.as_str().chars().any(is_unsafe));
    }

    #[test]
    fn the_escaped_form_is_unambiguous() {
        // A literal backslash-n and a real newline must not look alike.
        assert_ne!(PeerText::new("a\\nb"), PeerText::new("a\nb"));
        assert_eq!(PeerText::new("a\\nb").as_str(), r"a\\nb");
        assert_eq!(PeerText::new("tab\there").as_str(), r"tab\there");
    }

    #[test]
    fn plain_text_is_kept_and_long_text_cut_with_a_count() {
        assert_eq!(
            PeerText::new("GenericError: käse").as_str(),
            "GenericError: käse"
        );
        let long = "é".repeat(MAX_CHARS + 10);
        let t = PeerText::new(&long);
        assert_eq!(t.as_str().chars().filter(|&c| c == 'é').count(), MAX_CHARS);
        assert!(t.as_str().ends_with("…[20 more bytes]"), "{t}");
        // Escapes count as one kept character each, so output stays bounded.
        let t = PeerText::new(&"\n".repeat(10_000));
        assert!(
            t.as_str().len() < 2 * MAX_CHARS + 32,
            "{}",
            t.as_str().len()
        );
    }

    #[test]
    fn each_byte_escapes_to_at_most_the_stated_bound() {
        for b in 0u8..=255 {
            let t = PeerText::from_bytes(&[b]);
            assert!(t.len() <= MAX_ESCAPED_PER_BYTE, "{b:#x} -> {t}");
        }
        for c in ['\u{2028}', '\u{202e}', '\u{2069}', '\u{85}', '\u{9f}'] {
            let raw = c.to_string();
            let t = PeerText::new(&raw);
            assert!(t.len() <= MAX_ESCAPED_PER_BYTE * raw.len(), "{c:?} -> {t}");
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_are_replaced() {
        assert_eq!(PeerText::from_bytes(b"a\xffb\n").as_str(), "a\u{fffd}b\\n");
    }

    #[test]
    fn a_path_is_escaped_as_other_peer_text() {
        use std::os::unix::ffi::OsStrExt;
        let raw = b"/tmp/a\n2099-01-01T00:00:00Z ERROR forged\xff.sock";
        let p = std::path::Path::new(std::ffi::OsStr::from_bytes(raw));
        assert_eq!(
            PeerText::from_path(p).as_str(),
            "/tmp/a\\n2099-01-01T00:00:00Z ERROR forged\u{fffd}.sock"
        );
    }
}
