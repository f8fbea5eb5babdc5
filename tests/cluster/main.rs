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

#[path = "../apiserver/support.rs"]
#[allow(dead_code)]
mod cp;
mod dra;
#[path = "../realkubelet/pods.rs"]
#[allow(dead_code)]
mod pods;
mod refusal;
mod resize;
mod restarts;
mod rig;
#[path = "../realkubelet/support.rs"]
#[allow(dead_code)]
mod rk;
mod tutorial;
