//! numa-shim inside the smallest real cluster: the loopback control plane (etcd, kube-apiserver,
//! controller-manager and scheduler of integration/lib/apiserver.sh) and a real kubelet v1.37.2
//! registered in API-server mode (the shared kubelet harness, integration/kubelet.sh, with the
//! control plane's node kubeconfig) whose runtime endpoint is numa-shim, with containerd behind.
//! numa-shim learns pod specs from the API server (`podKnowledge: apiserver`) and reports
//! refusals there (`refusalReports: events-and-status`, the default).
//!
//! Pods come from `kubectl apply` in the tutorial's namespace `plrm-tutorial` (the manifests of
//! integration/kubelet-pods, scaled to this machine), are scheduled by the real scheduler, and the
//! tests read what the kernel applied (cgroupfs, /proc), what numa-shim decided (`/placement`) and
//! what the user sees (`kubectl get pod -o wide`, `kubectl describe pod`).
//!
//! Run by integration/apiserver-tests.sh (the "control plane" stage of integration/test-all.sh):
//! `cargo test --test cluster -- --ignored --test-threads=1`.

mod dra;
mod refusal;
mod resize;
mod restarts;
mod rig;
mod tutorial;

use numa_shim::testing::control_plane as cp;
use numa_shim::testing::kubelet_pods as pods;
use numa_shim::testing::real_kubelet as rk;
