//! numa-shim's lifecycle and relay in front of the stateful fake runtime, driven with kubelet-shaped CRI calls (src/testing/e2e): placements, restarts, bad input, `serve`, file modes, a full state directory, PodResources served, devices (and inferred device pods), drift.
//!
//! One test binary; each module was its own binary before.

mod bad_input;
mod devices_lifecycle;
mod drift;
mod file_modes;
mod inferred_devices;
mod lifecycle;
mod placement;
mod podresources_serve;
mod resize;
mod restart;
mod serve;
mod state_full;

use std::path::Path;

/// The arguments of `numa-shim serve` as these tests run the binary: listening on `listen` in
/// front of the fake runtime on `runtime`, the machine at `topology` (topology JSON or a sysfs
/// tree), the kubelet's settings in `kubelet_config`, its state in `state`, then `extra`.
fn serve_args(
    listen: &Path,
    runtime: &Path,
    topology: &Path,
    kubelet_config: &Path,
    state: &Path,
    extra: &[&str],
) -> Vec<String> {
    let path = |p: &Path| p.display().to_string();
    let (topology, kubelet_config, state) = (path(topology), path(kubelet_config), path(state));
    let mut flags = vec![
        "--topology",
        &topology,
        "--kubelet-config",
        &kubelet_config,
        "--state-dir",
        &state,
    ];
    flags.extend(extra);
    numa_shim::testing::process::serve_args(listen, runtime, &flags)
}
