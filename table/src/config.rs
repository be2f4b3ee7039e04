//! The part of torii's one configuration file that both binaries read.
//!
//! torii-gateway and torii-control share one TOML file (`configs/gateway.toml` is the
//! documented example and the embedded default, [`EMBEDDED_DEFAULT`]). Each binary validates
//! the sections it uses — the gateway its interfaces, drivers, conntrack and metrics,
//! torii-control its `[control]` table — and both read what this module parses, once, with
//! one set of rules: the Node name, the shared-memory directory the table is published in
//! ([`crate::shm`]), and the SNAT addresses (the gateway translates to them; torii-control
//! must not offer them as front doors). Every error names the key
//! (`snat.addresses[1]: "10.0.0.300" is not an IPv4 or IPv6 address`).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The default configuration compiled into both binaries: `configs/gateway.toml`,
/// which is also the demo's configuration.
pub const EMBEDDED_DEFAULT: &str = include_str!("../../configs/gateway.toml");

/// The shared-memory directory when `shm_dir` is absent.
pub const DEFAULT_SHM_DIR: &str = "/dev/shm/torii";

/// A configuration error, naming the key and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax, an unknown key or a value of the wrong type.
    #[error("{0}")]
    Syntax(String),
    /// A value that parses but is not acceptable.
    #[error("{key}: {message}")]
    Invalid {
        /// Dotted path of the key, e.g. `interfaces[0].addresses[1]`.
        key: String,
        /// What is wrong and what would be right.
        message: String,
    },
}

/// [`ConfigError::Invalid`] for `key`.
pub fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: key.into(), message: message.into() }
}

/// The text of the configuration file at `path`; `None` gives [`EMBEDDED_DEFAULT`].
///
/// # Errors
/// [`ConfigError::Read`] naming the file.
pub fn read(path: Option<&Path>) -> Result<String, ConfigError> {
    match path {
        None => Ok(EMBEDDED_DEFAULT.to_owned()),
        Some(p) => std::fs::read_to_string(p).map_err(|source| ConfigError::Read { path: p.to_owned(), source }),
    }
}

/// The keys both binaries read, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Common {
    /// `node_name`: the Kubernetes Node this gateway is (NodePorts, traffic policies).
    pub node_name: String,
    /// `shm_dir`: the directory holding the table files and the state region
    /// (default [`DEFAULT_SHM_DIR`]).
    pub shm_dir: PathBuf,
    /// `snat.addresses`, parsed, in the file's order (IPv4 and IPv6 mixed).
    pub snat_addresses: Vec<IpAddr>,
}

/// The shape of the shared keys. Keys of the binaries' own sections are ignored here: the
/// binary that uses a section rejects its unknown keys.
#[derive(Deserialize)]
struct RawCommon {
    node_name: String,
    #[serde(default = "default_shm_dir")]
    shm_dir: PathBuf,
    snat: RawSnatAddresses,
}

#[derive(Deserialize)]
struct RawSnatAddresses {
    addresses: Vec<String>,
}

fn default_shm_dir() -> PathBuf {
    PathBuf::from(DEFAULT_SHM_DIR)
}

impl Common {
    /// Parses and validates the shared keys of TOML text.
    ///
    /// # Errors
    /// [`ConfigError::Syntax`] for TOML errors, a missing key or a value of the wrong type;
    /// [`ConfigError::Invalid`] for an empty `node_name`, an SNAT address that is not one,
    /// or one listed twice.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let raw: RawCommon = toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        if raw.node_name.trim().is_empty() {
            return Err(invalid("node_name", "must not be empty"));
        }
        let snat_addresses = raw
            .snat
            .addresses
            .iter()
            .enumerate()
            .map(|(i, a)| {
                a.parse::<IpAddr>().map_err(|_| {
                    invalid(format!("snat.addresses[{i}]"), format!("{a:?} is not an IPv4 or IPv6 address"))
                })
            })
            .collect::<Result<Vec<IpAddr>, _>>()?;
        for (j, a) in snat_addresses.iter().enumerate() {
            if let Some(i) = snat_addresses[..j].iter().position(|b| b == a) {
                return Err(invalid(
                    format!("snat.addresses[{j}]"),
                    format!("{a} is listed twice (also snat.addresses[{i}]): each SNAT address once"),
                ));
            }
        }
        Ok(Self { node_name: raw.node_name, shm_dir: raw.shm_dir, snat_addresses })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_has_the_shared_keys() {
        let c = Common::from_toml(EMBEDDED_DEFAULT).unwrap();
        assert!(!c.node_name.is_empty());
        assert!(!c.snat_addresses.is_empty());
    }

    #[test]
    fn errors_name_the_key() {
        let e = Common::from_toml("node_name = \" \"\n[snat]\naddresses = []\n").unwrap_err();
        assert!(e.to_string().starts_with("node_name: "), "{e}");
        let e = Common::from_toml("node_name = \"n\"\n[snat]\naddresses = [\"10.0.0.1\", \"x\"]\n").unwrap_err();
        assert!(e.to_string().starts_with("snat.addresses[1]: \"x\" is not"), "{e}");
        let c =
            Common::from_toml("node_name = \"n\"\nworkers = 2\n[snat]\naddresses = [\"2001:db8::1\"]\nport_min = 1\n")
                .unwrap();
        assert_eq!(c.shm_dir, Path::new(DEFAULT_SHM_DIR), "other sections' keys are theirs to check");
        let e = Common::from_toml("node_name = \"n\"\n[snat]\naddresses = [\"10.0.0.1\", \"::1\", \"10.0.0.1\"]\n")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "snat.addresses[2]: 10.0.0.1 is listed twice (also snat.addresses[0]): each SNAT address once"
        );
    }
}
