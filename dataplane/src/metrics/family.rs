//! How an exported metric family is declared: once, as a [`Family`]
//! constant. Its name, type, label names and help text are what the export
//! writes (through [`Family::encode`]), and what the module docs list
//! (checked against the declarations by a unit test).

use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric, MetricEncoder,
    NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::fmt;

/// A metric family's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up; its samples are named `<family>_total`.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Cumulative buckets, `_bucket`, `_sum` and `_count`.
    Histogram,
}

impl Kind {
    /// The type's name in the exposition formats.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }

    fn metric_type(self) -> MetricType {
        match self {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
            Kind::Histogram => MetricType::Histogram,
        }
    }
}

/// One exported metric family: everything a scraper sees of it except its
/// values.
#[derive(Debug)]
pub struct Family {
    /// The family's name as OpenMetrics writes it; a counter's without
    /// `_total`, which its samples (and the text format 0.0.4's family
    /// name) add.
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// Its label names, in the order every sample carries them.
    pub labels: &'static [&'static str],
    /// The `# HELP` text.
    pub help: &'static str,
    /// What the module docs' table says of it (Markdown), when the help
    /// text is too short for that.
    pub doc: &'static str,
}

impl Family {
    /// The name its samples carry: `<name>_total` for a counter (a
    /// histogram's add `_bucket`, `_sum` and `_count` to this).
    pub fn sample_name(&self) -> String {
        match self.kind {
            Kind::Counter => format!("{}_total", self.name),
            _ => self.name.to_string(),
        }
    }

    /// Write the family's `# HELP` and `# TYPE` lines; its samples follow
    /// through the [`Samples`] returned.
    pub fn encode<'a>(
        &'static self,
        enc: &'a mut DescriptorEncoder<'_>,
    ) -> Result<Samples<'a>, fmt::Error> {
        let m = enc.encode_descriptor(self.name, self.help, None, self.kind.metric_type())?;
        Ok(Samples {
            family: self,
            enc: Some(m),
        })
    }

    /// This family's row of a module doc's table of exported names.
    pub fn doc_row(&self) -> String {
        let labels = if self.labels.is_empty() {
            "-".to_string()
        } else {
            self.labels.join(", ")
        };
        let meaning = if self.doc.is_empty() {
            self.help
        } else {
            self.doc
        };
        format!(
            "| `{}` | {} | {labels} | {meaning} |",
            self.sample_name(),
            self.kind.as_str()
        )
    }
}

/// The samples of one family, each given its label values in the order of
/// [`Family::labels`]. A family without labels has exactly one sample.
#[derive(Debug)]
pub struct Samples<'a> {
    family: &'static Family,
    /// `None` once the single sample of a family without labels is written.
    enc: Option<MetricEncoder<'a>>,
}

impl Samples<'_> {
    /// A counter's sample.
    pub fn counter(&mut self, labels: &[&str], v: impl EncodeCounterValue) -> fmt::Result {
        self.sample(Kind::Counter, labels, |m| ConstCounter::new(v).encode(m))
    }

    /// A gauge's sample.
    pub fn gauge(&mut self, labels: &[&str], v: impl EncodeGaugeValue) -> fmt::Result {
        self.sample(Kind::Gauge, labels, |m| ConstGauge::new(v).encode(m))
    }

    /// A histogram's sample: its sum and count, and the count in each
    /// bucket by upper bound (not cumulative; the encoder accumulates).
    pub fn histogram(
        &mut self,
        labels: &[&str],
        sum: f64,
        count: u64,
        buckets: &[(f64, u64)],
    ) -> fmt::Result {
        self.sample(Kind::Histogram, labels, |mut m| {
            m.encode_histogram::<NoLabelSet>(sum, count, buckets, None)
        })
    }

    fn sample(
        &mut self,
        kind: Kind,
        values: &[&str],
        write: impl FnOnce(MetricEncoder<'_>) -> fmt::Result,
    ) -> fmt::Result {
        let f = self.family;
        assert_eq!(f.kind, kind, "{} is a {}", f.name, f.kind.as_str());
        assert_eq!(
            values.len(),
            f.labels.len(),
            "{} has labels {:?}",
            f.name,
            f.labels
        );
        if values.is_empty() {
            // No family labels: an empty set would be written as `{}`.
            return write(self.enc.take().ok_or(fmt::Error)?);
        }
        let labels: Vec<(&str, &str)> = f
            .labels
            .iter()
            .copied()
            .zip(values.iter().copied())
            .collect();
        write(
            self.enc
                .as_mut()
                .ok_or(fmt::Error)?
                .encode_family(&labels)?,
        )
    }
}

/// Something that exports families of its own into the daemon's
/// [`Registry`](super::Registry), such as the core manager's
/// `vadapt_cores_*`: the registry calls it on every scrape, and need not
/// know what it is.
pub trait Exporter: Send + Sync + fmt::Debug {
    /// Write its families (each through [`Family::encode`]).
    fn encode(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result;
}

/// Panic unless the table of exported names in the module source `src`
/// (its `//! | \`vadapt_...` rows) is exactly the rows of `families`, in
/// order; the message shows the table it should be.
#[cfg(test)]
pub(crate) fn assert_doc_table(src: &str, families: &[&Family]) {
    let found: Vec<&str> = src
        .lines()
        .filter_map(|l| l.strip_prefix("//! "))
        .filter(|l| l.starts_with("| `vadapt_"))
        .collect();
    let want: Vec<String> = families.iter().map(|f| f.doc_row()).collect();
    assert!(
        found == want,
        "the module doc's table differs from the declarations; it should be:\n{}",
        want.iter()
            .map(|r| format!("//! {r}\n"))
            .collect::<String>()
    );
}
