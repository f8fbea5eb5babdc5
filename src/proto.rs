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

/// Kubelet Pods API (`v1alpha1`) and the part of the core v1 Pod encoding numa-shim reads.
pub mod podsapi {
    /// Pods API messages, `pods_client`/`pods_server`.
    #[allow(
        missing_docs,
        unreachable_pub,
        clippy::all,
        clippy::pedantic,
        rust_2018_idioms
    )]
    pub mod v1alpha1 {
        tonic::include_proto!("v1alpha1");
    }

    /// The core v1 Pod subset (`k8s.io.api.core.v1`).
    #[allow(
        missing_docs,
        unreachable_pub,
        clippy::all,
        clippy::pedantic,
        rust_2018_idioms
    )]
    pub mod core_v1 {
        tonic::include_proto!("k8s.io.api.core.v1");
    }
}

/// Kubelet device plugin API (`v1beta1`): the Registration and DevicePlugin services.
pub mod deviceplugin {
    /// Device plugin messages, `registration_client`/`_server`, `device_plugin_client`/`_server`.
    #[allow(
        missing_docs,
        unreachable_pub,
        clippy::all,
        clippy::pedantic,
        rust_2018_idioms
    )]
    pub mod v1beta1 {
        tonic::include_proto!("v1beta1");
    }
}

/// Kubelet plugin watcher registration (`pluginregistration`).
pub mod pluginregistration {
    /// `registration_client`/`_server` of the plugin watcher.
    #[allow(
        missing_docs,
        unreachable_pub,
        clippy::all,
        clippy::pedantic,
        rust_2018_idioms
    )]
    pub mod v1 {
        tonic::include_proto!("pluginregistration");
    }
}
