//! NetAP-ML's throughput model: a random forest exported from scikit-learn,
//! evaluated bit for bit as scikit-learn's `RandomForestRegressor.predict`.
//!
//! The lab writes the model (`python -m vadapt_lab.netap_ml train`, format
//! `vadapt-netap-ml-forest` version 1, described in
//! `lab/src/vadapt_lab/netap_ml/export.py`); [`Forest::from_json`] reads it
//! and [`Forest::predict`] evaluates it. Pure code: the caller reads the file.
//!
//! # Exactness
//!
//! Floats travel as the hex of their IEEE-754 bits, so thresholds and leaf
//! values are the ones scikit-learn holds. Prediction repeats scikit-learn's
//! arithmetic: the inputs are cast to `f32` (scikit-learn validates `X` as
//! float32 before walking the trees), each tree is walked with
//! `x[feature] as f64 <= threshold`, the leaf values are added in tree order
//! into an `f64` zero and the sum is divided by the number of trees. The
//! golden file `policy/models/netap-ml.golden.json` (inputs and scikit-learn's
//! output) pins this in a test.
//!
//! # Cost
//!
//! One prediction walks every tree from root to leaf: `trees × depth`
//! comparisons (the shipped model: see its `provenance`).

use serde::Deserialize;

/// The format name a model file must carry.
pub const FORMAT: &str = "vadapt-netap-ml-forest";
/// The format version this code reads.
pub const VERSION: u32 = 1;
/// The model's inputs, in order: VMs, sender threads per VM, message size
/// (bytes), polling interval (µs).
pub const FEATURES: [&str; 4] = ["vms", "threads", "msg_size", "interval_us"];

/// A model file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ForestError {
    /// The text is not JSON of the expected shape (truncated, wrong fields).
    #[error("model is not a valid {FORMAT} JSON document")]
    Parse(#[source] serde_json::Error),
    /// The `format` field names another format.
    #[error("model format is `{0}`, expected `{FORMAT}`")]
    Format(String),
    /// The `version` field is not [`VERSION`].
    #[error("model format version {0} is not supported (this build reads version {VERSION})")]
    Version(u32),
    /// The feature names differ from [`FEATURES`].
    #[error("model features are {0:?}, expected {FEATURES:?}")]
    Features(Vec<String>),
    /// The model has no trees.
    #[error("model has no trees")]
    NoTrees,
    /// A tree is malformed.
    #[error("tree {tree}, node {node}: {reason}")]
    Tree {
        /// Index of the tree.
        tree: usize,
        /// Index of the node in the tree.
        node: usize,
        /// What is wrong.
        reason: String,
    },
}

/// One node of a tree.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Node {
    /// Go to `left` if `x[feature] <= threshold`, else to `right`.
    Split {
        feature: usize,
        threshold: f64,
        left: usize,
        right: usize,
    },
    /// Prediction of this tree.
    Leaf(f64),
}

/// A random-forest regressor over [`FEATURES`]. See the module documentation.
#[derive(Clone, Debug, PartialEq)]
pub struct Forest {
    /// Each tree's nodes, root first; children always follow their parent.
    trees: Vec<Vec<Node>>,
}

/// The fields every version has.
#[derive(Deserialize)]
struct Header {
    format: String,
    version: u32,
}

#[derive(Deserialize)]
struct RawForest {
    features: Vec<String>,
    trees: Vec<RawTree>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTree {
    feature: Vec<i64>,
    left: Vec<i64>,
    right: Vec<i64>,
    threshold_or_value: Vec<String>,
}

/// The hex of an f64's bits with its trailing zero digits left out.
fn from_bits(hex: &str) -> Option<f64> {
    if hex.is_empty() || hex.len() > 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let v = u64::from_str_radix(hex, 16).ok()?;
    Some(f64::from_bits(v << (4 * (16 - hex.len()))))
}

fn parse_tree(t: usize, raw: &RawTree) -> Result<Vec<Node>, ForestError> {
    let n = raw.feature.len();
    let bad = |node: usize, reason: String| ForestError::Tree {
        tree: t,
        node,
        reason,
    };
    if n == 0 {
        return Err(bad(0, "no nodes".into()));
    }
    for (name, len) in [
        ("left", raw.left.len()),
        ("right", raw.right.len()),
        ("threshold_or_value", raw.threshold_or_value.len()),
    ] {
        if len != n {
            return Err(bad(0, format!("`{name}` has {len} entries, `feature` {n}")));
        }
    }
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let f = raw.feature[i];
        let node = if f == -1 {
            if raw.left[i] != -1 || raw.right[i] != -1 {
                return Err(bad(i, "a leaf (feature -1) has children".into()));
            }
            let hex = &raw.threshold_or_value[i];
            let v = from_bits(hex)
                .filter(|v| v.is_finite())
                .ok_or_else(|| bad(i, format!("leaf value `{hex}` is not finite f64 bits")))?;
            Node::Leaf(v)
        } else {
            let feature = usize::try_from(f)
                .ok()
                .filter(|&f| f < FEATURES.len())
                .ok_or_else(|| bad(i, format!("feature {f} is not -1 or a feature index")))?;
            let hex = &raw.threshold_or_value[i];
            let threshold = from_bits(hex)
                .filter(|v| !v.is_nan())
                .ok_or_else(|| bad(i, format!("threshold `{hex}` is not f64 bits")))?;
            // Children after their parent: every walk ends, in at most n steps.
            let child = |c: i64| {
                usize::try_from(c)
                    .ok()
                    .filter(|&c| c > i && c < n)
                    .ok_or_else(|| bad(i, format!("child {c} is not a later node of the tree")))
            };
            Node::Split {
                feature,
                threshold,
                left: child(raw.left[i])?,
                right: child(raw.right[i])?,
            }
        };
        nodes.push(node);
    }
    Ok(nodes)
}

impl Forest {
    /// Read a model file's text; the error says what is wrong with it.
    pub fn from_json(text: &str) -> Result<Forest, ForestError> {
        // Format and version first, so that a file of another version is
        // called that rather than a file with missing fields.
        let head: Header = serde_json::from_str(text).map_err(ForestError::Parse)?;
        if head.format != FORMAT {
            return Err(ForestError::Format(head.format));
        }
        if head.version != VERSION {
            return Err(ForestError::Version(head.version));
        }
        let raw: RawForest = serde_json::from_str(text).map_err(ForestError::Parse)?;
        if raw.features.iter().map(String::as_str).ne(FEATURES) {
            return Err(ForestError::Features(raw.features));
        }
        if raw.trees.is_empty() {
            return Err(ForestError::NoTrees);
        }
        let trees = raw
            .trees
            .iter()
            .enumerate()
            .map(|(t, tree)| parse_tree(t, tree))
            .collect::<Result<_, _>>()?;
        Ok(Forest { trees })
    }

    /// Number of trees.
    pub fn trees(&self) -> usize {
        self.trees.len()
    }

    /// Predicted throughput (the model's unit: Gb/s) for `x` in
    /// [`FEATURES`] order; bit-identical to scikit-learn's `predict`.
    pub fn predict(&self, x: &[f64; 4]) -> f64 {
        // scikit-learn walks the trees on float32 inputs.
        let x = x.map(|v| f64::from(v as f32));
        let mut sum = 0.0f64;
        for tree in &self.trees {
            let mut i = 0;
            loop {
                match tree[i] {
                    Node::Split {
                        feature,
                        threshold,
                        left,
                        right,
                    } => i = if x[feature] <= threshold { left } else { right },
                    Node::Leaf(v) => {
                        sum += v;
                        break;
                    }
                }
            }
        }
        sum / self.trees.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One tree: interval_us <= 1000.5 → 2.0, else vms <= 1.5 → 1.0, else 3.0;
    /// a second tree: a single leaf 0.5.
    fn tiny() -> String {
        let b = |v: f64| format!("\"{:016x}\"", v.to_bits());
        // As the lab writes them: trailing zero digits left out.
        let short = |v: f64| {
            format!(
                "\"{}\"",
                format!("{:016x}", v.to_bits()).trim_end_matches('0')
            )
        };
        format!(
            r#"{{"format":"{FORMAT}","version":1,"features":["vms","threads","msg_size","interval_us"],
            "target":"gbps","provenance":{{}},"trees":[
            {{"feature":[3,-1,0,-1,-1],"left":[1,-1,3,-1,-1],"right":[2,-1,4,-1,-1],
              "threshold_or_value":[{},{},{},{},{}]}},
            {{"feature":[-1],"left":[-1],"right":[-1],"threshold_or_value":[{}]}}]}}"#,
            short(1000.5),
            b(2.0),
            short(1.5),
            b(1.0),
            b(3.0),
            b(0.5)
        )
    }

    #[test]
    fn walks_each_tree_and_averages_in_tree_order() {
        let f = Forest::from_json(&tiny()).unwrap();
        assert_eq!(f.trees(), 2);
        assert_eq!(f.predict(&[1.0, 1.0, 64.0, 1000.0]), (2.0 + 0.5) / 2.0);
        assert_eq!(f.predict(&[1.0, 1.0, 64.0, 2000.0]), (1.0 + 0.5) / 2.0);
        assert_eq!(f.predict(&[2.0, 1.0, 64.0, 2000.0]), (3.0 + 0.5) / 2.0);
        // Just above the threshold in f64, but float32 rounds it back onto
        // it: scikit-learn goes left, and so do we.
        let above = f64::from_bits(1000.5f64.to_bits() + 1);
        assert_eq!(f.predict(&[1.0, 1.0, 64.0, above]), (2.0 + 0.5) / 2.0);
    }

    #[test]
    fn each_kind_of_bad_file_is_one_clear_error() {
        let good = tiny();
        let cases: Vec<(String, &str)> = vec![
            (good[..good.len() / 2].to_string(), "not a valid"),
            (String::new(), "not a valid"),
            (good.replace("\"version\":1", "\"version\":2"), "version 2"),
            (good.replace(FORMAT, "other"), "`other`"),
            (good.replace("\"msg_size\"", "\"size\""), "features are"),
            (
                good.replace("[3,-1,0,-1,-1]", "[7,-1,0,-1,-1]"),
                "feature 7",
            ),
            (good.replace("[1,-1,3,-1,-1]", "[0,-1,3,-1,-1]"), "child 0"),
            (
                good.replace("[1,-1,3,-1,-1]", "[1,-1,3,-1]"),
                "`left` has 4",
            ),
            (
                good.replace("\"trees\":[", "\"trees\":[],\"x\":[")
                    .replace("]}]}", "]}]"),
                "not a valid",
            ),
            (
                good.replacen("\"3ff0", "\"zz0", 1),
                "is not finite f64 bits",
            ),
            (
                good.replacen("\"408f44", "\"408f44000000000000", 1),
                "threshold",
            ),
        ];
        for (text, expected) in cases {
            let e = Forest::from_json(&text).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(expected), "{msg:?} lacks {expected:?}");
        }
        let no_trees = format!(
            r#"{{"format":"{FORMAT}","version":1,"features":["vms","threads","msg_size","interval_us"],"trees":[]}}"#
        );
        let v2 = format!(r#"{{"format":"{FORMAT}","version":2,"nodes":[]}}"#);
        assert!(matches!(
            Forest::from_json(&v2),
            Err(ForestError::Version(2))
        ));
        assert!(matches!(
            Forest::from_json(&no_trees),
            Err(ForestError::NoTrees)
        ));
    }
}
