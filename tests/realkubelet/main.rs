//! The real kubelet drives numa-shim: a standalone kubelet (k8s.io/kubernetes built from the Go
//! module proxy, version NUMA_SHIM_IT_KUBELET_VERSION) runs the tutorial's static pods through
//! numa-shim in front of the harness's runtime (containerd, or CRI-O with IT_RUNTIME=crio: the
//! tutorial's combination), and the tests read what the kernel applied to every container
//! (cpuset.cpus, cpuset.mems, CFS quota from cgroupfs, Cpus_allowed_list from /proc; the
//! container's cgroups are found from its PID, whatever the runtime names them).
//!
//! Reference mode runs the same manifests with the same settings through the kubelet's own CPU,
//! Memory and Topology Managers (numa-shim only relaying): the kernel must show the same, the
//! kubelet's cpu_manager_state and memory_manager_state must name the CPUs and NUMA nodes numa-shim
//! chose, and numa-shim's PodResources List and Get must equal the kubelet's own. It needs the
//! kubelet's own managers to be the v1.37 ones numa-shim implements (1.36's pod-level managers
//! differ in what the tutorial shows, `Env::has_reference_managers`); older kubelets are checked
//! against the expected values alone.
//!
//! Run by integration/test-all.sh and integration/kubelet-versions.sh on containerd:
//! `cargo test --test realkubelet -- --ignored --test-threads=1`; on CRI-O by
//! integration/runtime-suite.sh (IT_RUNTIME=crio), the tutorial's tests (`tutorial::`).

mod device_front;
mod devices;
mod lifecycle;
mod oracle;
mod soak;
mod tutorial;

use std::time::{Duration, Instant};

use numa_shim::testing::kubelet_pods as pods;
use numa_shim::testing::real_kubelet as support;
use serde_json::Value;
use support::*;

/// Who places pods: numa-shim (the kubelet's managers off) or the kubelet itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    NumaShim,
    Reference,
}

/// A kubelet and the numa-shim in front of its runtime.
struct Rig {
    // Dropped first: the kubelet goes before numa-shim.
    kubelet: Kubelet,
    shim: Shim,
    mode: Mode,
}

fn drop_in(env: &Env, dir: &str, file: &str, body: &str) -> String {
    let path = env.dir(dir).join(file);
    std::fs::write(
        &path,
        format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{body}"),
    )
    .unwrap();
    path.display().to_string()
}

/// The kubelet with the tutorial's settings (`scope`) in its main file. NumaShim: numa-shim
/// reads them from there and a drop-in turns the kubelet's managers off (the packaged
/// 10-numa-shim.conf); numa-shim starts first, without `podKnowledge`, as on a node where it
/// starts before the kubelet. Reference: the kubelet's own managers (with its pod-level
/// resource managers gate on where it exists) and numa-shim only relaying.
async fn rig(env: &Env, name: &str, mode: Mode, settings_text: &str) -> Rig {
    let rig = rig_unchecked(env, name, mode, settings_text).await;
    // The kubelet's calls reach the runtime the harness chose (CRI-O calls itself cri-o).
    if let Some(kind) = &env.runtime_kind {
        let want = if kind == "crio" {
            "cri-o"
        } else {
            kind.as_str()
        };
        assert_eq!(
            rig.shim.runtime_name().await,
            want,
            "the runtime behind numa-shim"
        );
    }
    rig
}

async fn rig_unchecked(env: &Env, name: &str, mode: Mode, settings_text: &str) -> Rig {
    rig_with(env, name, mode, settings_text, |_| Vec::new()).await
}

/// [`rig`] with more numa-shim flags (NumaShim mode), made from the configured kubelet.
async fn rig_with(
    env: &Env,
    name: &str,
    mode: Mode,
    settings_text: &str,
    extra: impl Fn(&Kubelet) -> Vec<String>,
) -> Rig {
    let main = env.fresh(name).join("kubelet.yaml");
    std::fs::write(&main, settings_text).unwrap();
    let main = main.display().to_string();
    match mode {
        Mode::NumaShim => {
            let socket = env.dir(&format!("shim-{name}")).join("cri.sock");
            let endpoint = format!("unix://{}", socket.display());
            // The Pods API is beta (on) from 1.37 and alpha in 1.36.
            let gates = if env.minor() == 36 {
                "featureGates: {PodsAPI: true}\n"
            } else {
                ""
            };
            let numa_shim = drop_in(
                env,
                name,
                "10-numa-shim.conf",
                &format!(
                    "containerRuntimeEndpoint: {endpoint}\ncpuManagerPolicy: none\n\
                     memoryManagerPolicy: None\ntopologyManagerPolicy: none\n{gates}"
                ),
            );
            let options: Vec<String> = [
                "--config",
                &main,
                "--drop-in",
                &numa_shim,
                "--runtime",
                &endpoint,
            ]
            .map(String::from)
            .to_vec();
            let mut kubelet = Kubelet::configure(env, name, &options);
            let mut flags: Vec<String> = vec![
                "--kubelet-config".into(),
                kubelet.fact("config").into(),
                "--kubelet-config-dir".into(),
                kubelet.fact("config_dir").into(),
                "--pods-api-socket".into(),
                kubelet.fact("pods_api").into(),
                "--kubelet-pod-resources-socket".into(),
                kubelet.fact("pod_resources").into(),
            ];
            flags.extend(extra(&kubelet));
            let shim = Shim::start(env, name, &flags).await;
            kubelet.run();
            Rig {
                kubelet,
                shim,
                mode,
            }
        }
        Mode::Reference => {
            let shim = Shim::relay(env, name).await;
            let mut options: Vec<String> = ["--config", &main, "--runtime", &shim.endpoint()]
                .map(String::from)
                .to_vec();
            if env.has_pod_level_managers() {
                options.push("--drop-in".into());
                options.push(drop_in(
                    env,
                    name,
                    "20-gates.conf",
                    "featureGates: {PodLevelResourceManagers: true}\n",
                ));
            }
            let mut kubelet = Kubelet::configure(env, name, &options);
            kubelet.run();
            Rig {
                kubelet,
                shim,
                mode,
            }
        }
    }
}

async fn wait_refusals(shim: &Shim, pod: &str, at_least: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let view = shim.placement();
        let found = view["refused"].as_array().and_then(|r| {
            r.iter()
                .find(|r| r["name"].as_str().is_some_and(|n| n.starts_with(pod)))
                .cloned()
        });
        if let Some(r) = &found {
            if r["count"].as_u64().unwrap_or(0) >= at_least {
                return r.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no {at_least} refusals of {pod}: {}",
            serde_json::to_string_pretty(&view["refused"]).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn wait_phase(kubelet: &Kubelet, pod: &str, phase: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(p) = kubelet.pod_named(pod) {
            if p["status"]["phase"] == phase {
                return p;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{pod} not {phase}: {:?}",
            kubelet.pod_named(pod)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
