//! The Prometheus text format 0.0.4, rewritten from OpenMetrics text.

/// Rewrite an OpenMetrics text exposition as Prometheus text format 0.0.4.
///
/// The two differ, for what this registry writes, in three places: 0.0.4
/// names a counter family after its samples (`# TYPE x_total counter`, where
/// OpenMetrics writes `# TYPE x counter`), has no `# UNIT` lines, and has no
/// `# EOF` terminator. OpenMetrics' `unknown` type is 0.0.4's `untyped`.
/// Samples are the same in both.
pub fn openmetrics_to_prometheus(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    // A `# HELP` line waits for its `# TYPE` line, which decides the name.
    let mut help: Option<(&str, &str)> = None;
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush_help(&mut out, help.take(), None);
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "unknown" => (name.to_string(), "untyped"),
                k => (name.to_string(), k),
            };
            flush_help(&mut out, help.take(), Some(&name));
            out.push_str("# TYPE ");
            out.push_str(&name);
            out.push(' ');
            out.push_str(kind);
            out.push('\n');
            continue;
        }
        flush_help(&mut out, help.take(), None);
        out.push_str(line);
        out.push('\n');
    }
    flush_help(&mut out, help, None);
    out
}

fn flush_help(out: &mut String, help: Option<(&str, &str)>, name: Option<&str>) {
    if let Some((n, text)) = help {
        out.push_str("# HELP ");
        out.push_str(name.unwrap_or(n));
        out.push(' ');
        out.push_str(text);
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversion_renames_counter_families_only() {
        let om = "# HELP a_b Help text.\n# TYPE a_b counter\n# UNIT a_b seconds\na_b_total 1\n# HELP g G.\n# TYPE g gauge\ng 2\n# TYPE u unknown\nu 3\n# EOF\n";
        assert_eq!(
            openmetrics_to_prometheus(om),
            "# HELP a_b_total Help text.\n# TYPE a_b_total counter\na_b_total 1\n# HELP g G.\n# TYPE g gauge\ng 2\n# TYPE u untyped\nu 3\n"
        );
    }
}
