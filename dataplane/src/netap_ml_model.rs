//! The NetAP-ML model file named by the daemon's `netap_ml_model` setting
//! (`--netap-ml-model PATH`): read at start-up, checked, and installed for
//! every `netap-ml` policy the daemon builds (`vadapt_policy::netap_ml::install_model`).
//!
//! A missing, truncated, wrong-version or wrong-feature file is one error at
//! start-up naming the file and what is wrong with it — unless the policy
//! asks for `fallback_to_netap`, in which case the daemon logs the reason and
//! its `netap-ml` ports run plain NetAP. Without the setting the built-in
//! model is used; a broken built-in model is refused the same way.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use vadapt_policy::forest::{Forest, ForestError};
use vadapt_policy::{PolicyConfig, PolicyKind};

/// The model file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The file could not be read.
    #[error("cannot read NetAP-ML model {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a usable model.
    #[error("NetAP-ML model {path} is unusable")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: ForestError,
    },
    /// The built-in model is unusable (a build defect).
    #[error("NetAP-ML built-in model is unusable: {0}")]
    Builtin(String),
}

/// Read and check the model file at `path`.
pub fn load(path: &Path) -> Result<Arc<Forest>, ModelError> {
    let text = std::fs::read_to_string(path).map_err(|source| ModelError::Read {
        path: path.to_owned(),
        source,
    })?;
    Forest::from_json(&text)
        .map(Arc::new)
        .map_err(|source| ModelError::Parse {
            path: path.to_owned(),
            source,
        })
}

/// Resolve the model the daemon's `netap-ml` policies will use and install
/// it. `policies` are every policy the configuration names. Errors only when
/// the model is unusable and some `netap-ml` policy (or the setting itself)
/// needs it without asking for `fallback_to_netap`.
pub fn prepare<'a>(
    path: Option<&Path>,
    policies: impl IntoIterator<Item = &'a PolicyConfig>,
) -> Result<(), ModelError> {
    let ml: Vec<_> = policies
        .into_iter()
        .filter_map(|p| match p {
            PolicyConfig::NetapMl(m) => Some(*m),
            _ => None,
        })
        .collect();
    if path.is_none() && ml.is_empty() {
        return Ok(());
    }
    let model = match path {
        Some(p) => load(p),
        None => vadapt_policy::netap_ml::builtin_model().map_err(ModelError::Builtin),
    };
    match model {
        Ok(forest) => {
            vadapt_policy::netap_ml::install_model(Ok(forest));
            Ok(())
        }
        Err(e) if !ml.is_empty() && ml.iter().all(|m| m.fallback_to_netap) => {
            let reason = vadapt_policy::netap_ml::model_error("NetAP-ML model", &e);
            tracing::warn!(
                "{reason}; {} ports run plain NetAP (fallback_to_netap)",
                PolicyKind::NetapMl
            );
            vadapt_policy::netap_ml::install_model(Err(reason));
            Ok(())
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vadapt_policy::netap_ml::{NetapMlParams, BUILTIN_MODEL_JSON};

    fn chain(e: &dyn std::error::Error) -> String {
        vadapt_policy::netap_ml::model_error("e", e)
    }

    #[test]
    fn each_bad_file_is_one_error_naming_the_file_and_the_fault() {
        let t = tempfile::tempdir().unwrap();
        let missing = t.path().join("none.json");
        let e = chain(&load(&missing).unwrap_err());
        assert!(e.contains("cannot read") && e.contains("none.json"), "{e}");
        let cases = [
            (
                "truncated",
                BUILTIN_MODEL_JSON[..1000].to_string(),
                "not a valid",
            ),
            (
                "version",
                BUILTIN_MODEL_JSON.replacen("\"version\":1", "\"version\":9", 1),
                "version 9",
            ),
            (
                "features",
                BUILTIN_MODEL_JSON.replacen("\"msg_size\"", "\"pkt_size\"", 1),
                "features are",
            ),
        ];
        for (name, text, fault) in cases {
            let path = t.path().join(format!("{name}.json"));
            std::fs::write(&path, text).unwrap();
            let e = chain(&load(&path).unwrap_err());
            assert!(
                e.contains(&format!("{name}.json")) && e.contains(fault),
                "{e}"
            );
        }
        let good = t.path().join("good.json");
        std::fs::write(&good, BUILTIN_MODEL_JSON).unwrap();
        assert!(load(&good).unwrap().trees() > 0);
    }

    #[test]
    fn a_bad_model_stops_start_up_unless_every_netap_ml_policy_falls_back() {
        let t = tempfile::tempdir().unwrap();
        let missing = t.path().join("none.json");
        let ml = PolicyConfig::NetapMl(NetapMlParams::default());
        let ml_fallback = PolicyConfig::NetapMl(NetapMlParams {
            fallback_to_netap: true,
            ..NetapMlParams::default()
        });
        let netap = PolicyConfig::default_for(PolicyKind::Netap);
        assert!(prepare(Some(&missing), [&netap]).is_err());
        assert!(prepare(Some(&missing), [&ml]).is_err());
        assert!(prepare(Some(&missing), [&ml_fallback, &ml]).is_err());
        assert!(prepare(None, [&netap]).is_ok());
    }
}
