//! Generated protobuf types, clients and servers (see `build.rs`). Owns nothing hand-written: the
//! schemas live in `proto/` and must never be edited to change behaviour, only to follow upstream.

/// CRI (`runtime.v1`).
pub mod cri {
    /// CRI v1 messages, `runtime_service_client`/`_server`, `image_service_client`/`_server`.
    #[allow(
        missing_docs,
        unreachable_pub,
        clippy::all,
        clippy::pedantic,
        rust_2018_idioms
    )]
    pub mod v1 {
        tonic::include_proto!("runtime.v1");
    }
}

/// Kubelet PodResources API (`v1`).
pub mod podresources {
    /// PodResources v1 messages, `pod_resources_lister_client`/`_server`.
    #[allow(
        missing_docs,
        unreachable_pub,
        clippy::all,
        clippy::pedantic,
        rust_2018_idioms
    )]
    pub mod v1 {
        tonic::include_proto!("v1");
    }
}
