//! The topology JSON of the spec (input of `simulate`, output of `topology`):
//!
//! ```json
//! {
//!   "cpus": [ {"id": 0, "core": 0, "socket": 0, "numa": 0, "uncore": 0} ],
//!   "numa": [ {"id": 0, "memory": "64Gi", "hugepages": {"2Mi": "0", "1Gi": "0"}, "distances": [10, 21]} ]
//! }
//! ```
//!
//! Reading: CPUs may come in any order (they are sorted); `die`, `numa` and `uncore` default to 0;
//! unknown top-level fields (the fixtures' `source`) are ignored. When `numa` is absent the nodes
//! are derived from the CPUs' `numa` ids with unknown memory (0 bytes, no hugepages, no
//! distances). Nodes are sorted by id; each node's `distances` is indexed by node id order
//! (ascending, as sysfs lists them) whatever order the nodes are listed in. Memory and
//! hugepage sizes are Kubernetes quantities (a bare number is bytes).
//!
//! Writing: memory in the largest binary unit that is exact ("64Gi", "6252756Ki"), hugepages keyed
//! by page size ascending, `die` only when non-zero. Pure conversion: never touches the filesystem.

use crate::quantity::format_binary;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::ser::SerializeMap;

use super::{CpuInfo, NumaNode, Topology, TopologyError};
use crate::quantity::Quantity;

/// The JSON document, the serde form of [`Topology`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct TopologyJson {
    cpus: Vec<CpuJson>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    numa: Option<Vec<NumaJson>>,
}

#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct CpuJson {
    id: u32,
    core: u32,
    socket: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    die: u32,
    #[serde(default)]
    numa: u32,
    #[serde(default)]
    uncore: u32,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct NumaJson {
    id: u32,
    #[serde(default)]
    memory: Bytes,
    #[serde(default)]
    hugepages: Hugepages,
    #[serde(default)]
    distances: Vec<u32>,
}

/// A byte count written as a binary quantity and read from any quantity.
#[derive(Debug, Clone, Copy, Default)]
struct Bytes(u64);

/// Page size → total bytes, keyed by page size as a quantity ("2Mi").
#[derive(Debug, Clone, Default)]
struct Hugepages(BTreeMap<u64, u64>);

/// Parses the topology JSON; `origin` names the input in errors (a path or "<string>").
pub(crate) fn from_str(text: &str, origin: &str) -> Result<Topology, TopologyError> {
    let doc: TopologyJson = serde_json::from_str(text).map_err(|source| TopologyError::Json {
        origin: origin.to_string(),
        source,
    })?;
    Topology::try_from(doc)
}

/// Writes the topology JSON, one CPU and one NUMA node per line.
pub(crate) fn to_string(topology: &Topology) -> Result<String, TopologyError> {
    let doc = TopologyJson::from(topology.clone());
    let mut out = String::from("{\n  \"cpus\": [\n");
    for (i, cpu) in doc.cpus.iter().enumerate() {
        let sep = if i + 1 < doc.cpus.len() { "," } else { "" };
        let _ = writeln!(out, "    {}{sep}", line(cpu)?);
    }
    out.push_str("  ]");
    if let Some(numa) = &doc.numa {
        out.push_str(",\n  \"numa\": [\n");
        for (i, node) in numa.iter().enumerate() {
            let sep = if i + 1 < numa.len() { "," } else { "" };
            let _ = writeln!(out, "    {}{sep}", line(node)?);
        }
        out.push_str("  ]");
    }
    out.push_str("\n}\n");
    Ok(out)
}

impl TryFrom<TopologyJson> for Topology {
    type Error = TopologyError;

    fn try_from(doc: TopologyJson) -> Result<Self, Self::Error> {
        let mut cpus: Vec<CpuInfo> = doc
            .cpus
            .iter()
            .map(|c| CpuInfo {
                id: c.id,
                core: c.core,
                socket: c.socket,
                die: c.die,
                numa: c.numa,
                uncore: c.uncore,
            })
            .collect();
        cpus.sort_by_key(|c| c.id);
        let numa = match doc.numa {
            Some(nodes) => sorted_nodes(nodes),
            None => derived_nodes(&cpus),
        };
        let topology = Self { cpus, numa };
        topology.validate()?;
        Ok(topology)
    }
}

impl From<Topology> for TopologyJson {
    fn from(t: Topology) -> Self {
        let cpus = t
            .cpus
            .iter()
            .map(|c| CpuJson {
                id: c.id,
                core: c.core,
                socket: c.socket,
                die: c.die,
                numa: c.numa,
                uncore: c.uncore,
            })
            .collect();
        let unknown =
            |n: &NumaNode| n.memory == 0 && n.hugepages.is_empty() && n.distances.is_empty();
        let derivable = t.numa.iter().all(unknown) && t.numa == derived_nodes(&t.cpus);
        let numa = (!derivable).then(|| {
            t.numa
                .into_iter()
                .map(|n| NumaJson {
                    id: n.id,
                    memory: Bytes(n.memory),
                    hugepages: Hugepages(n.hugepages),
                    distances: n.distances,
                })
                .collect()
        });
        Self { cpus, numa }
    }
}

/// Nodes sorted by id; distance vectors are already indexed in ascending id order.
fn sorted_nodes(nodes: Vec<NumaJson>) -> Vec<NumaNode> {
    let mut nodes: Vec<NumaNode> = nodes
        .into_iter()
        .map(|n| NumaNode {
            id: n.id,
            memory: n.memory.0,
            hugepages: n.hugepages.0,
            distances: n.distances,
        })
        .collect();
    nodes.sort_by_key(|n| n.id);
    nodes
}

/// One memory-unknown node per distinct CPU `numa` id.
fn derived_nodes(cpus: &[CpuInfo]) -> Vec<NumaNode> {
    let ids: std::collections::BTreeSet<u32> = cpus.iter().map(|c| c.numa).collect();
    ids.into_iter()
        .map(|id| NumaNode {
            id,
            ..NumaNode::default()
        })
        .collect()
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// A quantity that must be a whole, non-negative number of bytes.
fn quantity_bytes(field: &str, text: &str) -> Result<u64, TopologyError> {
    let q = Quantity::parse(text).map_err(|source| TopologyError::Quantity {
        field: field.to_string(),
        source,
    })?;
    if !q.is_integral() || q.is_negative() {
        return Err(TopologyError::NotBytes {
            field: field.to_string(),
            value: text.to_string(),
        });
    }
    Ok(q.value().unsigned_abs())
}

impl serde::Serialize for Bytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_binary(self.0))
    }
}

impl<'de> serde::Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = quantity_text(d)?;
        quantity_bytes("memory", &text)
            .map(Bytes)
            .map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for Hugepages {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (size, total) in &self.0 {
            map.serialize_entry(&format_binary(*size), &format_binary(*total))?;
        }
        map.end()
    }
}

impl<'de> serde::Deserialize<'de> for Hugepages {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw: BTreeMap<String, QuantityText> = serde::Deserialize::deserialize(d)?;
        let mut out = BTreeMap::new();
        for (size, total) in raw {
            let field = format!("hugepages {size:?}");
            let bytes = quantity_bytes(&field, &size).map_err(serde::de::Error::custom)?;
            if bytes == 0 {
                return Err(serde::de::Error::custom(TopologyError::ZeroPageSize {
                    field,
                }));
            }
            let total = quantity_bytes(&field, &total.0).map_err(serde::de::Error::custom)?;
            out.insert(bytes, total);
        }
        Ok(Self(out))
    }
}

/// A quantity given as a string or a bare number.
struct QuantityText(String);

impl<'de> serde::Deserialize<'de> for QuantityText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        quantity_text(d).map(Self)
    }
}

fn quantity_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Raw {
        S(String),
        U(u64),
        I(i64),
    }
    Ok(match <Raw as serde::Deserialize>::deserialize(d)? {
        Raw::S(s) => s,
        Raw::U(u) => u.to_string(),
        Raw::I(i) => i.to_string(),
    })
}

/// One element as a compact JSON line.
fn line<T: serde::Serialize>(value: &T) -> Result<String, TopologyError> {
    serde_json::to_string(value).map_err(|source| TopologyError::Json {
        origin: "<output>".to_string(),
        source,
    })
}

#[cfg(test)]
mod tests;
