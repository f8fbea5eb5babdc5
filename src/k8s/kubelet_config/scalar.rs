//! KubeletConfiguration maps hold strings (`map[string]string`); YAML writers often leave
//! `"true"` or `1` unquoted. These deserializers take any scalar as its text, so the value is
//! validated (with its field) by `resolve` rather than refused by the parser.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};

struct Scalar(String);

impl<'de> serde::Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A string-valued map whose values may be written as any scalar.
pub(super) fn map<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let m: Option<BTreeMap<String, Scalar>> = serde::Deserialize::deserialize(d)?;
    Ok(m.unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect())
}

/// Like `map`, keeping "absent" apart from "empty".
pub(super) fn opt_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    let m: Option<BTreeMap<String, Scalar>> = serde::Deserialize::deserialize(d)?;
    Ok(m.map(|m| m.into_iter().map(|(k, v)| (k, v.0)).collect()))
}

/// An optional string that may be written as any scalar.
pub(super) fn opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s: Option<Scalar> = serde::Deserialize::deserialize(d)?;
    Ok(s.map(|s| s.0))
}
