//! The shipped NetAP-ML forest against scikit-learn's own `predict`:
//! `policy/models/netap-ml.golden.json` holds inputs and the output of
//! `RandomForestRegressor.predict` (written by `python -m vadapt_lab.netap_ml
//! train ... --golden`), every float as its IEEE-754 bits. Every prediction
//! must be the same bits.

use vadapt_policy::forest::{Forest, FEATURES};
use vadapt_policy::netap_ml::BUILTIN_MODEL_JSON;

#[derive(serde::Deserialize)]
struct Golden {
    features: Vec<String>,
    rows: Vec<[String; 4]>,
    predictions: Vec<String>,
}

fn f(hex: &str) -> f64 {
    f64::from_bits(u64::from_str_radix(hex, 16).expect("hex bits"))
}

#[test]
fn shipped_forest_matches_scikit_learn_bit_for_bit() {
    let golden: Golden = serde_json::from_str(include_str!("../models/netap-ml.golden.json"))
        .expect("golden file parses");
    assert_eq!(golden.features, FEATURES);
    assert_eq!(golden.rows.len(), golden.predictions.len());
    assert!(golden.rows.len() > 400, "{} rows", golden.rows.len());
    let forest = Forest::from_json(BUILTIN_MODEL_JSON).expect("shipped model parses");
    let mut mismatches = Vec::new();
    for (row, want) in golden.rows.iter().zip(&golden.predictions) {
        let x = [f(&row[0]), f(&row[1]), f(&row[2]), f(&row[3])];
        let got = forest.predict(&x);
        if got.to_bits() != f(want).to_bits() {
            mismatches.push((x, got, f(want)));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} rows differ, first: {:?}",
        mismatches.len(),
        golden.rows.len(),
        mismatches.first()
    );
}

#[test]
fn rounding_inputs_in_f64_instead_of_f32_would_be_caught() {
    // The golden rows include values just above a threshold that float32
    // rounds back onto it; walking the trees in f64 must change some
    // prediction, or the test above could not tell the two apart.
    let golden: Golden = serde_json::from_str(include_str!("../models/netap-ml.golden.json"))
        .expect("golden file parses");
    let x32 = |v: f64| f64::from(v as f32);
    let differs = golden.rows.iter().any(|row| {
        let x = [f(&row[0]), f(&row[1]), f(&row[2]), f(&row[3])];
        x.iter().any(|&v| x32(v) != v)
    });
    assert!(differs, "no golden row exercises the float32 cast");
}
