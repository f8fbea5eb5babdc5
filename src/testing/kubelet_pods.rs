//! The tutorial's pods scaled to this machine (2 CPUs on one NUMA node, CPU 0 reserved, as the
//! kubelet's static CPU policy needs): the manifests in integration/kubelet-pods, which the
//! demo (`integration/demo.sh --kubelet`) runs too. Each file says how it was scaled.

macro_rules! manifest {
    ($name:ident, $file:literal) => {
        pub fn $name(image: &str) -> String {
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/integration/kubelet-pods/",
                $file
            ))
            .replace("IMAGE", image)
        }
    };
}

manifest!(pod_level_resource_demo, "pod-level-resource-demo.yaml");
manifest!(pod_scope_mixed, "pod-scope-mixed.yaml");
manifest!(empty_shared_pool, "empty-shared-pool.yaml");
manifest!(container_scope_mixed, "container-scope-mixed.yaml");
manifest!(guaranteed, "guaranteed.yaml");
manifest!(two_cpus, "two-cpus.yaml");
manifest!(best_effort, "best-effort.yaml");
