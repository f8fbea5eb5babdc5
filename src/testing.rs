//! The one home of test support, compiled only with the `testing` feature (which the
//! package's own tests, benches and `cargo clippy --all-targets` turn on through the
//! dev-dependency on itself; the release binary has none of it): fake runtimes, a fake kubelet
//! (Pods API and PodResources), relays and lifecycles started in a task, a fake device source;
//! the real-peer harnesses (`process`: the one numa-shim launcher; `real_kubelet`: real kubelets
//! and the suite's numa-shim, for tests/realkubelet and tests/cluster; `kubelet_pods`: the
//! tutorial's manifests; `control_plane`: the loopback control plane, for tests/apiserver and
//! tests/cluster) and the bench drivers' CRI client (`cri_client`). Tests, benches and the
//! real-peer suites use these rather than keeping copies or `#[path]` includes.

pub mod control_plane;
pub mod cri_client;
pub mod deviceplugin;
pub mod devices;
pub mod e2e;
pub mod kubelet_pods;
pub mod podresources;
pub mod pods_api;
pub mod process;
pub mod real_kubelet;
pub mod relay;
pub mod served;

/// A free TCP port on loopback (bound and released): never a fixed port, other harnesses run
/// tests at the same time on the same machine.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The value of one Prometheus sample line `name{labels} value` (labels as written), if there.
pub fn metric_sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.trim().parse().ok())
    })
}
