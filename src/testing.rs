//! The one home of test support, compiled only with the `testing` feature (which the
//! package's own tests, benches and `cargo clippy --all-targets` turn on through the
//! dev-dependency on itself; the release binary has none of it): fake runtimes, a fake kubelet
//! (Pods API and PodResources), relays and lifecycles started in a task, a fake device source.
//! Tests, benches and the real-peer harnesses use these rather than keeping copies.

pub mod deviceplugin;
pub mod devices;
pub mod e2e;
pub mod podresources;
pub mod pods_api;
pub mod process;
pub mod relay;
pub mod served;
