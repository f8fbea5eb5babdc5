//! The one home of test support, compiled only with the `testing` feature (which the
//! package's own tests, benches and `cargo clippy --all-targets` turn on through the
//! dev-dependency on itself; the release binary has none of it): fake runtimes, a fake kubelet
//! (Pods API and PodResources), relays and lifecycles started in a task, a fake device source, a
//! tmpfs to fill (`tmpfs`); the one launcher of the `numa-shim` binary (`process`, for every test
//! that runs `numa-shim serve`); the real-peer harnesses (`real_kubelet`: real kubelets
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
pub mod tmpfs;

/// A free TCP port on loopback (bound and released): never a fixed port, other harnesses run
/// tests at the same time on the same machine.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `(status, body)` of `GET path` from an HTTP server on `addr` (HTTP/1.0, the whole body);
/// `(0, "")` when nothing answers.
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return (0, String::new());
    };
    let _ = write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    (status, body.unwrap_or_default())
}

/// The value of one Prometheus sample line `name{labels} value` (labels as written), if there.
pub fn metric_sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.trim().parse().ok())
    })
}
