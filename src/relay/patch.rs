//! Wire-preserving patching: a [`Patch`] becomes protobuf bytes appended to the original
//! message. Protobuf merge rules (embedded messages merge, scalars and map keys: last wins) make
//! the runtime decode the original message with only the patched fields changed, so fields
//! numa-shim does not know pass byte for byte. Never re-encodes the original message.

use prost::encoding::{encode_key, encode_varint, WireType};

use super::hook::{Method, Patch, ResourcesPatch};

/// Field numbers on the path from each request to its resources and annotations.
mod field {
    pub(super) const RUN_CONFIG: u32 = 1; // RunPodSandboxRequest.config
    pub(super) const SANDBOX_ANNOTATIONS: u32 = 7; // PodSandboxConfig.annotations
    pub(super) const SANDBOX_LINUX: u32 = 8; // PodSandboxConfig.linux
    pub(super) const SANDBOX_LINUX_RESOURCES: u32 = 5; // LinuxPodSandboxConfig.resources
    pub(super) const CREATE_CONFIG: u32 = 2; // CreateContainerRequest.config
    pub(super) const CONTAINER_ANNOTATIONS: u32 = 10; // ContainerConfig.annotations
    pub(super) const CONTAINER_LINUX: u32 = 15; // ContainerConfig.linux
    pub(super) const CONTAINER_LINUX_RESOURCES: u32 = 1; // LinuxContainerConfig.resources
    pub(super) const UPDATE_LINUX: u32 = 2; // UpdateContainerResourcesRequest.linux
    pub(super) const UPDATE_ANNOTATIONS: u32 = 4; // UpdateContainerResourcesRequest.annotations
    pub(super) const CPU_PERIOD: u32 = 1; // LinuxContainerResources.*
    pub(super) const CPU_QUOTA: u32 = 2;
    pub(super) const CPU_SHARES: u32 = 3;
    pub(super) const CPUSET_CPUS: u32 = 6;
    pub(super) const CPUSET_MEMS: u32 = 7;
}

/// The bytes to append to a `method` request message so that it carries `patch`. Empty for an
/// empty patch and for methods that are only observed.
pub(crate) fn encode(method: Method, patch: &Patch) -> Vec<u8> {
    let resources = encode_resources(&patch.resources);
    let (resources, annotations_field) = match method {
        Method::RunPodSandbox => (
            nest(
                field::SANDBOX_LINUX,
                &nest(field::SANDBOX_LINUX_RESOURCES, &resources),
            ),
            field::SANDBOX_ANNOTATIONS,
        ),
        Method::CreateContainer => (
            nest(
                field::CONTAINER_LINUX,
                &nest(field::CONTAINER_LINUX_RESOURCES, &resources),
            ),
            field::CONTAINER_ANNOTATIONS,
        ),
        Method::UpdateContainerResources => {
            let mut out = nest(field::UPDATE_LINUX, &resources);
            out.extend(encode_annotations(field::UPDATE_ANNOTATIONS, patch));
            return out;
        }
        _ => return Vec::new(),
    };
    let mut config = resources;
    config.extend(encode_annotations(annotations_field, patch));
    let outer = match method {
        Method::RunPodSandbox => field::RUN_CONFIG,
        _ => field::CREATE_CONFIG,
    };
    nest(outer, &config)
}

/// The set resource fields, or nothing.
fn encode_resources(r: &ResourcesPatch) -> Vec<u8> {
    let mut out = Vec::new();
    let ints = [
        (field::CPU_PERIOD, r.cpu_period),
        (field::CPU_QUOTA, r.cpu_quota),
        (field::CPU_SHARES, r.cpu_shares),
    ];
    for (tag, value) in ints {
        if let Some(v) = value {
            prost::encoding::int64::encode(tag, &v, &mut out);
        }
    }
    for (tag, value) in [
        (field::CPUSET_CPUS, &r.cpuset_cpus),
        (field::CPUSET_MEMS, &r.cpuset_mems),
    ] {
        if let Some(v) = value {
            prost::encoding::string::encode(tag, v, &mut out);
        }
    }
    out
}

/// One map entry per annotation (`key = 1`, `value = 2`); a repeated key's last entry wins.
fn encode_annotations(tag: u32, patch: &Patch) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, value) in &patch.annotations {
        let mut entry = Vec::new();
        prost::encoding::string::encode(1, key, &mut entry);
        prost::encoding::string::encode(2, value, &mut entry);
        out.extend(nest_always(tag, &entry));
    }
    out
}

/// `inner` as embedded message field `tag`, or nothing if `inner` is empty.
fn nest(tag: u32, inner: &[u8]) -> Vec<u8> {
    if inner.is_empty() {
        return Vec::new();
    }
    nest_always(tag, inner)
}

fn nest_always(tag: u32, inner: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(inner.len() + 6);
    encode_key(tag, WireType::LengthDelimited, &mut out);
    encode_varint(inner.len() as u64, &mut out);
    out.extend_from_slice(inner);
    out
}

#[cfg(test)]
mod tests;
