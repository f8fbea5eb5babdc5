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
