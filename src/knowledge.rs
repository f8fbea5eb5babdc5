//! Pod knowledge: what numa-shim knows of a pod beyond what one CRI call carries.
//!
//! Sources, best first: the kubelet Pods API, the API server, then inference from CRI requests
//! alone (`infer`, rules in docs/pod-knowledge.md). This module turns each source into the
//! decision core's `PodSpec`; it never decides placement.

pub mod infer;
