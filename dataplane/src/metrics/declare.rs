//! How a counter is declared: once, as a field of a
//! [`declare_metrics!`] struct, as Firecracker declares its metrics as the
//! fields of serialized structs. From that one line the macro makes
//!
//! * the atomic the workers add to (a field of the counters struct);
//! * the field of the copy `vadapt stats --json` prints (the snapshot
//!   struct, serialized by serde: the field's name is the JSON name);
//! * the family the field is a sample of, with its name, type, labels and
//!   help text (a [`Family`] constant), and how the field is written into
//!   it ([`Export`]);
//! * its column of the table `vadapt stats` prints, when it has one
//!   ([`Column`]).
//!
//! Counters are declared in three shapes:
//!
//! * `by_dir`: `[AtomicU64; 2]` indexed by [`Dir`](super::Dir); two JSON
//!   fields, the family's `dir` label `"tx"` / `"rx"`;
//! * `scalars`: an `AtomicU64`, grouped by the family they are samples of
//!   (`_ ()` for none: in the JSON only); a field written `= "value"` is
//!   the sample with that value of the family's last label;
//! * `maps`: `[AtomicU64; N]` indexed like a list of label values; one JSON
//!   object by value (`nonzero`: only the values not 0, `all`: every one).
//!
//! A family is written `NAME (Kind "name" [labels] "help" "doc")`, with
//! `only "kind"` at the end when it is exported for the items of ports of
//! that kind only. What is not a plain count (a gauge in seconds, a flag,
//! a histogram, a name) stays a field of the structs written by hand (the
//! fields before the snapshot's `..` and after it) and is exported by
//! hand. The counters struct's `Default` is every field's, or the value
//! written after its type (`= expr`).

use super::family::{Family, Kind, Samples};
use prometheus_client::encoding::DescriptorEncoder;
use std::fmt;

/// How one declared counter is exported.
#[derive(Debug)]
pub struct Export<S> {
    /// The family it is (part of) the samples of.
    pub family: &'static Family,
    /// Exported only for the items of ports of this kind (`None`: all).
    pub only: Option<&'static str>,
    /// Its samples of one item.
    pub samples: fn(&S) -> Vec<Sample>,
}

/// A sample of a declared counter: the value of its family's last label
/// (`None` when the item's labels are all of them), and the count.
pub type Sample = (Option<&'static str>, u64);

/// A column of the table `vadapt stats` prints, one row per item.
#[derive(Debug)]
pub struct Column<S> {
    /// Its header.
    pub header: &'static str,
    /// Its width (right-aligned).
    pub width: usize,
    /// Its value in an item's row.
    pub value: fn(&S) -> u64,
}

/// One item whose declared counters are exported: a queue pair, a port, a
/// worker.
#[derive(Debug)]
pub struct Item<'a, S> {
    /// The values of the labels its families begin with (`port`, `queue`).
    pub labels: Vec<String>,
    /// The kind of its port (`""` for a worker).
    pub port_kind: &'a str,
    /// Its counters.
    pub stats: &'a S,
}

/// The families of `exports`, in order, each once.
pub fn families<S>(exports: &[Export<S>]) -> Vec<&'static Family> {
    exports
        .chunk_by(|a, b| std::ptr::eq(a.family, b.family))
        .map(|e| e[0].family)
        .collect()
}

/// Write the families of `exports`, each with the samples of every item.
pub fn encode<S>(
    exports: &[Export<S>],
    items: &[Item<'_, S>],
    enc: &mut DescriptorEncoder<'_>,
) -> fmt::Result {
    for family in exports.chunk_by(|a, b| std::ptr::eq(a.family, b.family)) {
        let head = &family[0];
        let mut m = head.family.encode(enc)?;
        for item in items
            .iter()
            .filter(|i| head.only.is_none_or(|k| k == i.port_kind))
        {
            for e in family {
                for (value, n) in (e.samples)(item.stats) {
                    let mut labels: Vec<&str> = item.labels.iter().map(String::as_str).collect();
                    labels.extend(value);
                    sample(&mut m, head.family.kind, &labels, n)?;
                }
            }
        }
    }
    Ok(())
}

fn sample(m: &mut Samples<'_>, kind: Kind, labels: &[&str], n: u64) -> fmt::Result {
    match kind {
        Kind::Counter => m.counter(labels, n),
        Kind::Gauge => m.gauge(labels, n as i64),
        Kind::Histogram => Err(fmt::Error),
    }
}

/// Declare a counters struct and its snapshot (see the module docs).
macro_rules! declare_metrics {
    (
        $(#[$stats_meta:meta])*
        pub struct $Stats:ident {
            $( $(#[$xm:meta])* pub $xf:ident : $xty:ty $(= $xinit:expr)?, )*
        }
        $(#[$snap_meta:meta])*
        pub struct $Snap:ident {
            $( $(#[$hm:meta])* pub $hf:ident : $hty:ty, )*
            ..
            $( $(#[$tm:meta])* pub $tf:ident : $tty:ty, )*
        }
        by_dir {
            $(
                $(#[$dm:meta])*
                $df:ident => $dtx:ident $drx:ident $(, columns $dtxh:literal $drxh:literal $dw:literal)?;
                family $DF:tt $dspec:tt
            )*
        }
        scalars {
            $(
                family $F:tt $spec:tt {
                    $( $(#[$cm:meta])* $cf:ident $(= $cv:literal)? $(, column $ch:literal $cw:literal)?; )*
                }
            )*
        }
        maps {
            $(
                $(#[$mm:meta])*
                $mf:ident : [$mlen:expr] $mnames:expr => $msnap:ident $mkeep:ident $(, column $mh:literal $mw:literal)?;
                family $MF:tt $mspec:tt
            )*
        }
    ) => {
        $(#[$stats_meta])*
        pub struct $Stats {
            $( $(#[$xm])* pub $xf: $xty, )*
            $( $(#[$dm])* pub $df: [std::sync::atomic::AtomicU64; 2], )*
            $( $( $(#[$cm])* pub $cf: std::sync::atomic::AtomicU64, )* )*
            $( $(#[$mm])* pub $mf: [std::sync::atomic::AtomicU64; $mlen], )*
        }

        $(#[$snap_meta])*
        pub struct $Snap {
            $( $(#[$hm])* pub $hf: $hty, )*
            $(
                #[doc = concat!("[`", stringify!($Stats), "::", stringify!($df), "`], `tx`.")]
                #[serde(default)]
                pub $dtx: u64,
            )*
            $(
                #[doc = concat!("[`", stringify!($Stats), "::", stringify!($df), "`], `rx`.")]
                #[serde(default)]
                pub $drx: u64,
            )*
            $( $( $(#[$cm])* #[serde(default)] pub $cf: u64, )* )*
            $(
                #[doc = concat!("[`", stringify!($Stats), "::", stringify!($mf), "`], by label value.")]
                #[serde(default)]
                pub $msnap: std::collections::BTreeMap<String, u64>,
            )*
            $( $(#[$tm])* pub $tf: $tty, )*
        }

        impl Default for $Stats {
            fn default() -> Self {
                $Stats {
                    $( $xf: $crate::metrics::declare::default_or!($($xinit)?), )*
                    $( $df: Default::default(), )*
                    $( $( $cf: Default::default(), )* )*
                    $( $mf: Default::default(), )*
                }
            }
        }

        impl $Stats {
            /// How the declared counters are exported, family by family in
            /// export order.
            pub fn exports() -> Vec<$crate::metrics::declare::Export<Self>> {
                use std::sync::atomic::Ordering::Relaxed;
                let exports = vec![
                    $(
                        $crate::metrics::declare::export!($DF $dspec, |s: &Self| vec![
                            (Some("tx"), s.$df[0].load(Relaxed)),
                            (Some("rx"), s.$df[1].load(Relaxed)),
                        ]),
                    )*
                    $( $(
                        $crate::metrics::declare::export!($F $spec, |s: &Self| vec![(
                            $crate::metrics::declare::optional!($($cv)?),
                            s.$cf.load(Relaxed),
                        )]),
                    )* )*
                    $(
                        $crate::metrics::declare::export!($MF $mspec, |s: &Self| ($mnames)
                            .iter()
                            .zip(&s.$mf)
                            .map(|(value, c)| (Some(*value), c.load(Relaxed)))
                            .collect()),
                    )*
                ];
                exports.into_iter().flatten().collect()
            }

            /// The families of the declared counters, in export order.
            pub fn families() -> Vec<&'static $crate::metrics::family::Family> {
                $crate::metrics::declare::families(&Self::exports())
            }
        }

        impl $Snap {
            /// A copy of the declared counters of `s`; the other fields are
            /// their defaults.
            pub fn counters_of(s: &$Stats) -> Self {
                use std::sync::atomic::Ordering::Relaxed;
                $Snap {
                    $( $dtx: s.$df[0].load(Relaxed), $drx: s.$df[1].load(Relaxed), )*
                    $( $( $cf: s.$cf.load(Relaxed), )* )*
                    $(
                        $msnap: ($mnames)
                            .iter()
                            .zip(&s.$mf)
                            .map(|(value, c)| (value.to_string(), c.load(Relaxed)))
                            .filter(|(_, n)| $crate::metrics::declare::keep!($mkeep, *n))
                            .collect(),
                    )*
                    ..Default::default()
                }
            }

            /// The table's columns of the declared counters, in order.
            pub fn columns() -> Vec<$crate::metrics::declare::Column<Self>> {
                vec![
                    $( $( $crate::metrics::declare::Column { header: $dtxh, width: $dw, value: |s: &Self| s.$dtx }, )? )*
                    $( $( $crate::metrics::declare::Column { header: $drxh, width: $dw, value: |s: &Self| s.$drx }, )? )*
                    $( $( $(
                        $crate::metrics::declare::Column { header: $ch, width: $cw, value: |s: &Self| s.$cf },
                    )? )* )*
                    $( $(
                        $crate::metrics::declare::Column { header: $mh, width: $mw, value: |s: &Self| s.$msnap.values().sum() },
                    )? )*
                ]
            }
        }

        $( $crate::metrics::declare::family_const!($DF $dspec); )*
        $( $crate::metrics::declare::family_const!($F $spec); )*
        $( $crate::metrics::declare::family_const!($MF $mspec); )*
    };
}
pub(crate) use declare_metrics;

/// A family's constant (none for `_ ()`).
macro_rules! family_const {
    (_ ()) => {};
    ($F:ident ($kind:ident $name:literal [$($l:literal),*] $help:literal $doc:literal $(only $only:literal)?)) => {
        #[doc = $help]
        pub const $F: $crate::metrics::family::Family = $crate::metrics::family::Family {
            name: $name,
            kind: $crate::metrics::family::Kind::$kind,
            labels: &[$($l),*],
            help: $help,
            doc: $doc,
        };
    };
}
pub(crate) use family_const;

/// A counter's [`Export`] (`None` for `_ ()`).
macro_rules! export {
    (_ (), $samples:expr) => {
        None
    };
    ($F:ident ($kind:ident $name:literal [$($l:literal),*] $help:literal $doc:literal $(only $only:literal)?), $samples:expr) => {
        Some($crate::metrics::declare::Export {
            family: &$F,
            only: $crate::metrics::declare::optional!($($only)?),
            samples: $samples,
        })
    };
}
pub(crate) use export;

/// `Some(value)`, or `None` when there is none.
macro_rules! optional {
    () => {
        None
    };
    ($value:literal) => {
        Some($value)
    };
}
pub(crate) use optional;

/// Whether a map keeps a value `n` in the snapshot.
macro_rules! keep {
    (nonzero, $n:expr) => {
        $n != 0
    };
    (all, $n:expr) => {{
        let _ = $n;
        true
    }};
}
pub(crate) use keep;

/// `value`, or the type's default when there is none.
macro_rules! default_or {
    () => {
        Default::default()
    };
    ($value:expr) => {
        $value
    };
}
pub(crate) use default_or;
