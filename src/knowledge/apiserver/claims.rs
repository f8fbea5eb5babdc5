//! DRA claims of a pod, read through the API server: the pod (`spec.resourceClaims`, the
//! containers' `resources.claims`, `status.resourceClaimStatuses` for claims made from a
//! template) → each ResourceClaim's `status.allocation.devices.results` (driver, pool, device) →
//! the ResourceSlices of those drivers, whose device attributes give the NUMA node: the standard
//! `resource.kubernetes.io/numaNode` (an int, or an int list whose first entry is the device's
//! own node, KEP-5491/KEP-6072), else the configured names (`draNumaAttributes`).
//!
//! The JSON parsing is pure (`pod_claims`, `allocated`, `slice_nodes`) and tested on fixtures;
//! [`ClaimReader::read`] does the requests. Reads only; decides nothing (docs/devices.md, "DRA
//! claims").

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::Value;

use super::connection::Connection;
use super::{http, ApiServerError};
use crate::placement::device::claims::Claim;
use crate::placement::device::Device;

/// The standard NUMA node attribute of DRA devices.
pub const STANDARD_NUMA_ATTRIBUTE: &str = "resource.kubernetes.io/numaNode";

/// How long reading one pod's claims may take in all (the decision waits for it).
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A pod's claim as the pod names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodClaim {
    /// The `spec.resourceClaims[].name` the containers refer to.
    pub entry: String,
    /// The ResourceClaim object's name (`None`: a template's claim not made yet, or none needed).
    pub claim: Option<String>,
    /// Containers (init and app) whose `resources.claims` name the entry.
    pub containers: BTreeSet<String>,
}

/// One allocated device: (driver, pool, device).
pub type DeviceKey = (String, String, String);

/// Why a pod's claims could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error(transparent)]
    Api(#[from] ApiServerError),
    #[error("{what}: {reason}")]
    Invalid { what: String, reason: String },
    #[error("no answer from the API server within {0:?}")]
    Timeout(Duration),
}

/// The pod's claims: `spec.resourceClaims` with the object names (`resourceClaimName`, or for a
/// `resourceClaimTemplateName` the name in `status.resourceClaimStatuses`).
pub fn pod_claims(pod: &Value) -> Vec<PodClaim> {
    let spec = &pod["spec"];
    let generated: BTreeMap<&str, &str> = pod["status"]["resourceClaimStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| Some((s["name"].as_str()?, s["resourceClaimName"].as_str()?)))
        .collect();
    let mut users: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for list in ["initContainers", "containers"] {
        for c in spec[list].as_array().into_iter().flatten() {
            let Some(name) = c["name"].as_str() else {
                continue;
            };
            for r in c["resources"]["claims"].as_array().into_iter().flatten() {
                if let Some(entry) = r["name"].as_str() {
                    users.entry(entry).or_default().insert(name.to_string());
                }
            }
        }
    }
    spec["resourceClaims"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|rc| {
            let entry = rc["name"].as_str()?;
            let claim = rc["resourceClaimName"]
                .as_str()
                .or_else(|| generated.get(entry).copied())
                .map(str::to_string);
            Some(PodClaim {
                entry: entry.to_string(),
                claim,
                containers: users.get(entry).cloned().unwrap_or_default(),
            })
        })
        .collect()
}

/// The devices allocated to a ResourceClaim (`status.allocation.devices.results`); empty when
/// it is not allocated.
pub fn allocated(claim: &Value) -> Vec<DeviceKey> {
    claim["status"]["allocation"]["devices"]["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            Some((
                r["driver"].as_str()?.to_string(),
                r["pool"].as_str()?.to_string(),
                r["device"].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// The NUMA node(s) of one device's attribute value: `{"int": n}` → [n]; `{"ints": [n, ...]}`
/// → [n] (the first entry is the device's own node; the rest are same-socket neighbours).
fn attribute_nodes(value: &Value) -> Option<Vec<u32>> {
    let node = value["int"]
        .as_i64()
        .or_else(|| value["ints"].as_array()?.first()?.as_i64())?;
    u32::try_from(node).ok().map(|n| vec![n])
}

/// A device attribute under its full name: an unqualified name is in the driver's domain.
fn qualified(driver: &str, name: &str) -> String {
    if name.contains('/') {
        name.to_string()
    } else {
        format!("{driver}/{name}")
    }
}

/// The NUMA node of each device in a ResourceSlice list (`items`), by (driver, pool, device):
/// the first of `attributes` (full names, the standard one first) that the device has; a device
/// with none of them maps to an empty list. Only slices of a pool's newest generation count.
pub fn slice_nodes(list: &Value, attributes: &[String]) -> BTreeMap<DeviceKey, Vec<u32>> {
    let items = list["items"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let pool_of = |s: &Value| -> Option<(String, String, i64)> {
        let spec = &s["spec"];
        Some((
            spec["driver"].as_str()?.to_string(),
            spec["pool"]["name"].as_str()?.to_string(),
            spec["pool"]["generation"].as_i64().unwrap_or(0),
        ))
    };
    let mut newest: BTreeMap<(String, String), i64> = BTreeMap::new();
    for (driver, pool, generation) in items.iter().filter_map(pool_of) {
        let g = newest.entry((driver, pool)).or_insert(generation);
        *g = (*g).max(generation);
    }
    let mut out = BTreeMap::new();
    for s in items {
        let Some((driver, pool, generation)) = pool_of(s) else {
            continue;
        };
        if newest.get(&(driver.clone(), pool.clone())) != Some(&generation) {
            continue;
        }
        for d in s["spec"]["devices"].as_array().into_iter().flatten() {
            let Some(name) = d["name"].as_str() else {
                continue;
            };
            let attrs: BTreeMap<String, &Value> = d["attributes"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (qualified(&driver, k), v))
                .collect();
            let nodes = attributes
                .iter()
                .find_map(|a| attrs.get(a).and_then(|v| attribute_nodes(v)))
                .unwrap_or_default();
            out.insert((driver.clone(), pool.clone(), name.to_string()), nodes);
        }
    }
    out
}

/// The attribute names looked for, standard first, then `configured` (unique, in order).
pub fn attribute_names(configured: &[String]) -> Vec<String> {
    let mut names = vec![STANDARD_NUMA_ATTRIBUTE.to_string()];
    for c in configured {
        if !names.contains(c) {
            names.push(c.clone());
        }
    }
    names
}

/// The decision core's claims from what was read: one per pod claim with an object, its
/// allocated devices with their nodes (`<driver>/<pool>/<device>`; a device missing from the
/// slices has no node).
pub fn claims(
    namespace: &str,
    pod: &[PodClaim],
    allocations: &BTreeMap<String, Vec<DeviceKey>>,
    nodes: &BTreeMap<DeviceKey, Vec<u32>>,
) -> Vec<Claim> {
    pod.iter()
        .filter_map(|pc| {
            let name = pc.claim.as_ref()?;
            let devices = allocations
                .get(name)
                .into_iter()
                .flatten()
                .map(|key| Device {
                    id: format!("{}/{}/{}", key.0, key.1, key.2),
                    numa_nodes: nodes.get(key).cloned().unwrap_or_default(),
                })
                .collect();
            Some(Claim {
                name: format!("{namespace}/{name}"),
                containers: pc.containers.clone(),
                devices,
            })
        })
        .collect()
}

/// Reads pods' claims over one API server connection.
#[derive(Debug, Clone)]
pub struct ClaimReader {
    conn: Connection,
    /// NUMA attribute names, the standard one first.
    attributes: Vec<String>,
    timeout: Duration,
}

impl ClaimReader {
    /// A reader looking for the standard attribute, then `configured`.
    pub fn new(conn: Connection, configured: &[String]) -> Self {
        Self {
            conn,
            attributes: attribute_names(configured),
            timeout: READ_TIMEOUT,
        }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn server(&self) -> &str {
        self.conn.server()
    }

    /// The claims of pod `namespace/name`, with their devices' NUMA nodes; empty for a pod
    /// without claims (one GET of the pod, then one per claim and one per driver).
    pub async fn read(&self, namespace: &str, name: &str) -> Result<Vec<Claim>, ClaimError> {
        match tokio::time::timeout(self.timeout, self.read_now(namespace, name)).await {
            Ok(result) => result,
            Err(_) => Err(ClaimError::Timeout(self.timeout)),
        }
    }

    async fn read_now(&self, namespace: &str, name: &str) -> Result<Vec<Claim>, ClaimError> {
        let pod = self
            .get(&format!("/api/v1/namespaces/{namespace}/pods/{name}"))
            .await?;
        let pod_claims = pod_claims(&pod);
        if pod_claims.is_empty() {
            return Ok(Vec::new());
        }
        let mut allocations = BTreeMap::new();
        let mut drivers = BTreeSet::new();
        for claim in pod_claims.iter().filter_map(|pc| pc.claim.as_ref()) {
            let object = self
                .get(&format!(
                    "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{claim}"
                ))
                .await?;
            let devices = allocated(&object);
            drivers.extend(devices.iter().map(|d| d.0.clone()));
            allocations.insert(claim.clone(), devices);
        }
        let mut nodes = BTreeMap::new();
        for driver in drivers {
            let list = self
                .get(&format!(
                    "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3D{driver}"
                ))
                .await?;
            nodes.extend(slice_nodes(&list, &self.attributes));
        }
        Ok(claims(namespace, &pod_claims, &allocations, &nodes))
    }

    async fn get(&self, path: &str) -> Result<Value, ClaimError> {
        let response = http::get(&self.conn, path).await?;
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|source| ApiServerError::Http {
                url: format!("{}{path}", self.conn.server()),
                source,
            })?
            .to_bytes();
        serde_json::from_slice(&body).map_err(|e| ClaimError::Invalid {
            what: format!("GET {path}"),
            reason: e.to_string(),
        })
    }
}
