//! PodResources test support: a fake kubelet PodResources server ([`kubelet`]) and a registry
//! with numa-shim's PodResources server in front of it ([`registry`]).

pub mod kubelet;
pub mod registry;
