//! The kernel's CPU list format (`0-3,8,10-11`), as in `cpuset.cpus`,
//! `Cpus_allowed_list` and `/sys/devices/system/cpu/online`.

/// Largest CPU number accepted, plus one: the kernel's largest `NR_CPUS`.
/// Bounds what a malformed list (`0-4000000000`) can make us allocate.
pub const MAX_CPUS: usize = 8192;

/// A CPU list could not be parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CpuListError {
    /// An element is not `N` or `N-M` with `N <= M`.
    #[error("{0:?} is not a CPU number or range")]
    Invalid(String),
    /// A CPU number is [`MAX_CPUS`] or more.
    #[error("CPU {0} is beyond the largest CPU number a kernel supports")]
    TooLarge(usize),
}

/// The CPUs of a list, ascending and without repeats. Surrounding whitespace
/// (the newline of a sysfs file) is ignored; an empty list is empty (a new
/// cgroup's `cpuset.cpus`).
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, CpuListError> {
    let mut cpus = Vec::new();
    for element in text.trim().split(',').filter(|e| !e.is_empty()) {
        let invalid = || CpuListError::Invalid(element.to_string());
        let (first, last) = match element.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (element.trim(), element.trim()),
        };
        let first: usize = first.parse().map_err(|_| invalid())?;
        let last: usize = last.parse().map_err(|_| invalid())?;
        if first > last {
            return Err(invalid());
        }
        if last >= MAX_CPUS {
            return Err(CpuListError::TooLarge(last));
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// `cpus` as a list with ranges (`[0, 1, 2, 5]` → `0-2,5`), in ascending
/// order whatever the order given; empty for no CPUs.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let first = sorted[i];
        let mut last = first;
        while i + 1 < sorted.len() && sorted[i + 1] == last + 1 {
            i += 1;
            last = sorted[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if first == last {
            out.push_str(&first.to_string());
        } else {
            out.push_str(&format!("{first}-{last}"));
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n").unwrap(),
            [0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpu_list("5").unwrap(), [5]);
        assert_eq!(parse_cpu_list("\n").unwrap(), Vec::<usize>::new());
        assert_eq!(parse_cpu_list("3,1-2,2").unwrap(), [1, 2, 3]);
        assert_eq!(
            parse_cpu_list("3-1"),
            Err(CpuListError::Invalid("3-1".into()))
        );
        assert_eq!(parse_cpu_list("a"), Err(CpuListError::Invalid("a".into())));
        assert_eq!(
            parse_cpu_list("1-"),
            Err(CpuListError::Invalid("1-".into()))
        );
        assert_eq!(
            parse_cpu_list("0-4000000000"),
            Err(CpuListError::TooLarge(4_000_000_000))
        );
    }

    #[test]
    fn formats_with_ranges_and_round_trips() {
        assert_eq!(format_cpu_list(&[0, 1, 2, 5]), "0-2,5");
        assert_eq!(format_cpu_list(&[7, 3, 4, 3]), "3-4,7");
        assert_eq!(format_cpu_list(&[]), "");
        for list in ["0", "0-1", "0,2,4-7,9", ""] {
            assert_eq!(format_cpu_list(&parse_cpu_list(list).unwrap()), list);
        }
    }
}
