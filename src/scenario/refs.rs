//! "A string or a mapping" scenario values (`pods: [path.yaml, {inline manifest}]`,
//! `remove: ns/name` or `remove: {pod: ns/name, container: c}`, `start: false` or
//! `start: {pod, containers}`), deserialized without buffering so the YAML parser's field paths
//! survive into errors.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};

/// Either a string (usually a path or a name) or an inline value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StrOr<T> {
    Str(String),
    Inline(T),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for StrOr<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = StrOr<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a mapping")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(StrOr::Str(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(StrOr::Inline)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// The mapping form of a removal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RemoveSpec {
    /// `namespace/name`, or `name` in namespace `default`.
    pub(super) pod: String,
    pub(super) container: Option<String>,
}

/// An in-place resize: a container's new resources, or without `container` the pod-level
/// `spec.resources`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ResizeSpec {
    /// `namespace/name`, or `name` in namespace `default`.
    pub(super) pod: String,
    pub(super) container: Option<String>,
    pub(super) resources: crate::k8s::ResourceRequirements,
}

/// The mapping form of a start: containers of an admitted pod that start now, in this order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StartSpec {
    /// `namespace/name`, or `name` in namespace `default`.
    pub(super) pod: String,
    pub(super) containers: Vec<String>,
}

/// A `start` value: `false` beside an `admit` (its containers do not start yet), or a mapping
/// (a step of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StartValue {
    Flag(bool),
    Containers(StartSpec),
}

impl<'de> Deserialize<'de> for StartValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StartValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("false (beside admit) or a mapping {pod, containers}")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(StartValue::Flag(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                StartSpec::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(StartValue::Containers)
            }
        }
        d.deserialize_any(V)
    }
}

/// One `steps` entry: a mapping with exactly one of `admit`, `start` or `remove`; `admit` may
/// carry `start: false`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStep {
    pub(super) admit: Option<StrOr<Box<crate::k8s::Pod>>>,
    pub(super) start: Option<StartValue>,
    pub(super) remove: Option<StrOr<RemoveSpec>>,
    pub(super) resize: Option<ResizeSpec>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_and_mappings_both_load() {
        let v: Vec<StrOr<RemoveSpec>> =
            serde_yaml_ng::from_str("- ns/a\n- {pod: b, container: c}\n").unwrap();
        assert_eq!(v[0], StrOr::Str("ns/a".into()));
        assert_eq!(
            v[1],
            StrOr::Inline(RemoveSpec {
                pod: "b".into(),
                container: Some("c".into())
            })
        );
    }

    #[test]
    fn steps_are_single_key_mappings() {
        let v: Vec<RawStep> = serde_yaml_ng::from_str("- remove: a\n- admit: pod.yaml\n").unwrap();
        assert_eq!(v[0].remove, Some(StrOr::Str("a".into())));
        assert_eq!(v[1].admit, Some(StrOr::Str("pod.yaml".into())));
        let e = serde_yaml_ng::from_str::<Vec<RawStep>>("- evict: a\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `evict`"), "{e}");
    }

    #[test]
    fn start_is_a_flag_beside_admit_or_a_step_of_its_own() {
        let v: Vec<RawStep> = serde_yaml_ng::from_str(
            "- {admit: p.yaml, start: false}\n- start: {pod: ns/p, containers: [a, b]}\n",
        )
        .unwrap();
        assert_eq!(v[0].start, Some(StartValue::Flag(false)));
        assert_eq!(
            v[1].start,
            Some(StartValue::Containers(StartSpec {
                pod: "ns/p".into(),
                containers: vec!["a".into(), "b".into()]
            }))
        );
        let e =
            serde_yaml_ng::from_str::<Vec<RawStep>>("- start: {pod: p, names: [a]}\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `names`"), "{e}");
    }

    #[test]
    fn inline_errors_keep_their_path() {
        let e = serde_yaml_ng::from_str::<Vec<StrOr<Box<crate::k8s::Pod>>>>(
            "- metadata: {name: a}\n  spec: {containers: [{name: c, resources: {limits: {cpu: x}}}]}\n",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("spec.containers[0].resources.limits"),
            "{e}"
        );
    }
}
