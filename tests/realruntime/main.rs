//! Pods placed through numa-shim on the real runtime of this machine (containerd + runc, or
//! CRI-O + conmon + runc), checked against what the kernel applied: cpuset.cpus, cpuset.mems and
//! the CFS quota from the cgroup filesystem, Cpus_allowed_list from /proc. Run by
//! integration/test-all.sh and integration/runtime-suite.sh
//! (`cargo test --test realruntime -- --ignored`), which start the private runtime.
//!
//! The machine has two CPUs and one NUMA node, so pods are sized for it: every test runs with
//! an empty CPU reservation (numa-shim accepts it with a warning).

mod errors;
use numa_shim::testing::pods_api;
mod resize;
mod restart;
mod runtimes;
mod state;
mod support;

use numa_shim::cpuset::CpuSet;
use support::*;

fn all_cpus() -> CpuSet {
    numa_shim::topology::Topology::load(std::path::Path::new("/sys"))
        .unwrap()
        .cpu_set()
}

/// The tutorial's mixed pod scaled to two CPUs: a 2-CPU budget whose main container gets one
/// exclusive CPU while two sidecars share the other (pod spec from the kubelet Pods API).
#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn mixed_pod_main_exclusive_sidecars_share_the_rest() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let (shim, api) = Shim::with_pods_api(&env, "mixed", POD_SCOPE).await;
    let cri = shim.cri().await;
    let mut cleanup = Cleanup::new(&env);

    let pod = PodDef::new("mixed", resources(Some(2000), Some(2000), Some(256 * MI)));
    let sidecars = vec![
        container("proxy", Some("Always"), None),
        container("logs", Some("Always"), None),
    ];
    api.add(&api_pod(
        &pod,
        ("2", "256Mi"),
        sidecars,
        vec![container("main", None, Some(("1", "128Mi")))],
    ));
    let sandbox = cri.run_pod(&env, &pod).await.unwrap();
    cleanup.sandboxes.push(sandbox.clone());
    // Kubelet order: sidecars (with the pod limits), then the app container.
    let pod_limits = resources(None, Some(2000), Some(256 * MI));
    let proxy = cri
        .start_container(&env, &pod, &sandbox, "proxy", pod_limits.clone())
        .await
        .unwrap();
    let logs = cri
        .start_container(&env, &pod, &sandbox, "logs", pod_limits)
        .await
        .unwrap();
    let main = cri
        .start_container(
            &env,
            &pod,
            &sandbox,
            "main",
            resources(Some(1000), Some(1000), Some(128 * MI)),
        )
        .await
        .unwrap();

    let m = cri.applied(&main).await;
    let (p, l) = (cri.applied(&proxy).await, cri.applied(&logs).await);
    eprintln!("main {m:?}\nproxy {p:?}\nlogs {l:?}");
    assert_eq!(m.cpus.len(), 1, "main gets one exclusive CPU");
    assert_eq!(m.cfs_quota, -1, "exclusive CPUs lift the CFS quota");
    assert_eq!(
        m.cpus_allowed, m.cpus,
        "the process is confined to its cpuset"
    );
    assert_eq!(
        p.cpus,
        all_cpus().difference(&m.cpus),
        "sidecars share the rest of the budget"
    );
    assert_eq!(l.cpus, p.cpus);
    assert_eq!(
        p.cfs_quota, 200_000,
        "pool containers keep the quota from the pod limit"
    );
    assert_eq!(l.cpus_allowed, l.cpus);
    for r in [&m, &p, &l] {
        assert_eq!(
            r.mems.to_string(),
            "0",
            "static memory manager pins NUMA node 0"
        );
    }
}

/// The same mixed pod with no pod spec at all (CRI-only inference, as in the demo): the sidecars
/// arrive first and get the whole budget; when main takes its slice, numa-shim moves the running
/// sidecars to what is left.
#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn mixed_pod_inferred_from_cri_moves_sidecars_to_the_pod_pool() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let shim = Shim::start(&env, "inferred", POD_SCOPE, &["--pod-knowledge", "cri"]).await;
    let cri = shim.cri().await;
    let mut cleanup = Cleanup::new(&env);
    let pod = PodDef::new(
        "inferred",
        resources(Some(2000), Some(2000), Some(256 * MI)),
    );
    let sandbox = cri.run_pod(&env, &pod).await.unwrap();
    cleanup.sandboxes.push(sandbox.clone());
    let pod_limits = resources(None, Some(2000), Some(256 * MI));
    let proxy = cri
        .start_container(&env, &pod, &sandbox, "proxy", pod_limits)
        .await
        .unwrap();
    assert_eq!(
        cri.applied(&proxy).await.cpus,
        all_cpus(),
        "alone, the sidecar has the budget"
    );
    let main = cri
        .start_container(
            &env,
            &pod,
            &sandbox,
            "main",
            resources(Some(1000), Some(1000), Some(128 * MI)),
        )
        .await
        .unwrap();
    let m = cri.applied(&main).await;
    assert_eq!((m.cpus.len(), m.cfs_quota), (1, -1), "{m:?}");
    let rest = all_cpus().difference(&m.cpus);
    let p = cri.wait_cpus(&proxy, &rest.to_string()).await;
    assert_eq!(
        p.cpus,
        rest,
        "the running sidecar moved to the pod shared pool; log:\n{}",
        shim.log_text()
    );
    assert_eq!(p.cpus_allowed, rest);
}

/// A PodResources client that is not numa-shim's (Python, generated by grpcio-tools from the
/// kubelet's proto) asks numa-shim after a mixed pod was placed on containerd: its answers match
/// the cpusets read from the kernel; /metrics counts the placements.
#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn pod_resources_and_metrics_match_what_the_kernel_applied() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let podres = env.run.join("shim-podres-api.sock");
    let podres_arg = podres.display().to_string();
    let metrics = free_metrics_address();
    let extra = [
        "--pod-resources-socket",
        podres_arg.as_str(),
        "--kubelet-pod-resources-socket",
        "none",
        "--metrics-address",
        metrics,
    ];
    let (shim, api) = Shim::with_pods_api_and(&env, "podres", POD_SCOPE, &extra).await;
    let cri = shim.cri().await;
    let mut cleanup = Cleanup::new(&env);

    let pod = PodDef::new(
        "reported",
        resources(Some(2000), Some(2000), Some(256 * MI)),
    );
    let sidecars = vec![container("proxy", Some("Always"), None)];
    api.add(&api_pod(
        &pod,
        ("2", "256Mi"),
        sidecars,
        vec![container("main", None, Some(("1", "128Mi")))],
    ));
    let sandbox = cri.run_pod(&env, &pod).await.unwrap();
    cleanup.sandboxes.push(sandbox.clone());
    let proxy = cri
        .start_container(
            &env,
            &pod,
            &sandbox,
            "proxy",
            resources(None, Some(2000), Some(256 * MI)),
        )
        .await
        .unwrap();
    let main = cri
        .start_container(
            &env,
            &pod,
            &sandbox,
            "main",
            resources(Some(1000), Some(1000), Some(128 * MI)),
        )
        .await
        .unwrap();
    let (m, p) = (cri.applied(&main).await, cri.applied(&proxy).await);

    let answer = podresources_client(&podres, &["get", "reported", "default"]);
    let reported = &answer["pod_resources"];
    let ids = |v: &serde_json::Value| -> CpuSet {
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap() as u32)
            .collect()
    };
    assert_eq!(
        ids(&reported["cpu_ids"]),
        m.cpus.union(&p.cpus),
        "pod cpu_ids = the budget: {answer}"
    );
    let containers = reported["containers"].as_array().unwrap();
    let of = |name: &str| {
        containers
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {answer}"))
    };
    assert_eq!(
        ids(&of("main")["cpu_ids"]),
        m.cpus,
        "exclusive container reports its slice"
    );
    assert!(
        ids(&of("proxy")["cpu_ids"]).is_empty(),
        "pool containers report no cpu_ids"
    );
    assert!(
        !reported["memory"].as_array().unwrap().is_empty(),
        "pod-level memory blocks: {answer}"
    );

    let scraped = tokio::task::spawn_blocking(move || http_get(metrics, "/metrics"))
        .await
        .unwrap();
    let assigned = |kind: &str| {
        sample(&scraped, &format!("resource_manager_container_assignments{{assignment_type=\"{kind}\",resource_name=\"cpu\"}}"))
    };
    assert_eq!(assigned("pod_exclusive"), 1.0, "{scraped}");
    assert_eq!(assigned("pod_shared"), 1.0, "{scraped}");
    let ready = tokio::task::spawn_blocking(move || http_get(metrics, "/readyz"))
        .await
        .unwrap();
    assert!(!ready.is_empty());
}

/// A pod whose exclusive containers take the whole budget while a shared container exists is
/// refused at RunPodSandbox with the kubelet's reason; nothing is created.
#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn empty_shared_pool_is_rejected_at_run_pod_sandbox() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    // Restricted policy surfaces the empty pool as the kubelet's hint failure; best-effort reaches
    // the allocation check. Both are the kubelet's behaviour; check best-effort's reason here.
    let (shim, api) = Shim::with_pods_api(&env, "empty", POD_SCOPE).await;
    let cri = shim.cri().await;
    let _cleanup = Cleanup::new(&env);

    let pod = PodDef::new("empty", resources(Some(2000), Some(2000), Some(256 * MI)));
    let apps = vec![
        container("a", None, Some(("2", "128Mi"))),
        container("b", None, None),
    ];
    api.add(&api_pod(&pod, ("2", "256Mi"), vec![], apps));
    let err = cri.run_pod(&env, &pod).await.unwrap_err();
    eprintln!("{err:?}");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(
        err.message()
            .starts_with("EmptyPodSharedPoolError: pod rejected"),
        "{}",
        err.message()
    );
    assert!(
        cri.sandboxes_of(&pod.uid).await.is_empty(),
        "no sandbox reached the runtime"
    );
}

/// Container scope with pod-level resources: the eligible container's CPU comes from the node
/// pool, the other container runs in the node shared pool.
#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn container_scope_with_pod_level_resources() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let settings = POD_SCOPE.replace(
        "topologyManagerScope: pod",
        "topologyManagerScope: container",
    );
    let shim = Shim::start(&env, "cscope", &settings, &["--pod-knowledge", "cri"]).await;
    let cri = shim.cri().await;
    let mut cleanup = Cleanup::new(&env);

    let pod = PodDef::new("cscope", resources(Some(2000), Some(2000), Some(256 * MI)));
    let sandbox = cri.run_pod(&env, &pod).await.unwrap();
    cleanup.sandboxes.push(sandbox.clone());
    let main = cri
        .start_container(
            &env,
            &pod,
            &sandbox,
            "main",
            resources(Some(1000), Some(1000), Some(128 * MI)),
        )
        .await
        .unwrap();
    let helper = cri
        .start_container(
            &env,
            &pod,
            &sandbox,
            "helper",
            resources(None, Some(2000), Some(256 * MI)),
        )
        .await
        .unwrap();
    let m = cri.applied(&main).await;
    let h = cri
        .wait_cpus(&helper, &all_cpus().difference(&m.cpus).to_string())
        .await;
    eprintln!("main {m:?}\nhelper {h:?}");
    assert_eq!(m.cpus.len(), 1);
    assert_eq!(m.cfs_quota, -1);
    assert_eq!(
        h.cpus,
        all_cpus().difference(&m.cpus),
        "the helper runs in the node shared pool"
    );
    assert_eq!(h.cfs_quota, 200_000);
}

/// The tutorial's container-scope pod (scaled to two CPUs) with the Static memory policy, as the
/// tutorial runs it: the sidecar gets an exclusive CPU and its memory pinned; the workers have no
/// memory request, which kubelet v1.37.2's Memory Manager skips (numa-shim refused the pod
/// before), and run in the node shared pool under the pod limit. Pod spec from the Pods API.
#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn tutorial_container_scope_pod_runs_with_the_static_memory_policy() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let settings = POD_SCOPE
        .replace(
            "topologyManagerScope: pod",
            "topologyManagerScope: container",
        )
        .replace(
            "topologyManagerPolicy: best-effort",
            "topologyManagerPolicy: single-numa-node",
        );
    assert!(settings.contains("memoryManagerPolicy: Static"));
    let (shim, api) = Shim::with_pods_api(&env, "tutcs", &settings).await;
    let cri = shim.cri().await;
    let mut cleanup = Cleanup::new(&env);

    let pod = PodDef::new(
        "container-scope-mixed",
        resources(Some(2000), Some(2000), Some(256 * MI)),
    );
    api.add(&api_pod(
        &pod,
        ("2", "256Mi"),
        vec![container(
            "infrastructure-sidecar",
            Some("Always"),
            Some(("1", "128Mi")),
        )],
        vec![
            container("worker-1", None, None),
            container("worker-2", None, None),
        ],
    ));
    let sandbox = cri.run_pod(&env, &pod).await.unwrap();
    cleanup.sandboxes.push(sandbox.clone());
    let sidecar = cri
        .start_container(
            &env,
            &pod,
            &sandbox,
            "infrastructure-sidecar",
            resources(Some(1000), Some(1000), Some(128 * MI)),
        )
        .await
        .unwrap();
    let pod_limits = resources(None, Some(2000), Some(256 * MI));
    let mut workers = Vec::new();
    for name in ["worker-1", "worker-2"] {
        let id = cri
            .start_container(&env, &pod, &sandbox, name, pod_limits.clone())
            .await
            .unwrap();
        workers.push(id);
    }
    let s = cri.applied(&sidecar).await;
    eprintln!("sidecar {s:?}");
    assert_eq!(s.cpus.len(), 1, "the sidecar gets one exclusive CPU");
    assert_eq!(s.cfs_quota, -1);
    assert_eq!(s.cpus_allowed, s.cpus);
    assert_eq!(
        s.mems.to_string(),
        "0",
        "its memory is pinned to NUMA node 0"
    );
    for w in &workers {
        let w = cri
            .wait_cpus(w, &all_cpus().difference(&s.cpus).to_string())
            .await;
        eprintln!("worker {w:?}");
        assert_eq!(
            w.cpus,
            all_cpus().difference(&s.cpus),
            "workers run in the node shared pool"
        );
        assert_eq!(w.cfs_quota, 200_000, "capped by the pod limit");
        assert_eq!(w.cpus_allowed, w.cpus);
    }
}

/// A classic Guaranteed pod (no pod-level resources) and a Burstable pod on the same node; the
/// Burstable container's cpuset follows the node shared pool as the exclusive pod comes and goes.
#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn node_shared_pool_shrinks_and_grows_around_an_exclusive_pod() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let (shim, api) = Shim::with_pods_api(&env, "pool", POD_SCOPE).await;
    let cri = shim.cri().await;
    let mut cleanup = Cleanup::new(&env);
    let all = all_cpus();

    let burstable = PodDef::new("burst", resources(Some(500), Some(1000), Some(256 * MI)));
    api.add(&classic_pod(&burstable, "b", ("500m", "1", "256Mi")));
    let bsb = cri.run_pod(&env, &burstable).await.unwrap();
    cleanup.sandboxes.push(bsb.clone());
    let b = cri
        .start_container(
            &env,
            &burstable,
            &bsb,
            "b",
            resources(Some(500), Some(1000), Some(256 * MI)),
        )
        .await
        .unwrap();
    let before = cri.applied(&b).await;
    assert_eq!(
        before.cpus, all,
        "a Burstable container runs on the whole node shared pool"
    );
    assert_eq!(before.cfs_quota, 100_000);

    let classic = PodDef::new("classic", resources(Some(1000), Some(1000), Some(128 * MI)));
    api.add(&classic_pod(&classic, "g", ("1", "1", "128Mi")));
    let gsb = cri.run_pod(&env, &classic).await.unwrap();
    cleanup.sandboxes.push(gsb.clone());
    let g = cri
        .start_container(
            &env,
            &classic,
            &gsb,
            "g",
            resources(Some(1000), Some(1000), Some(128 * MI)),
        )
        .await
        .unwrap();
    let gr = cri.applied(&g).await;
    assert_eq!(
        gr.cpus.len(),
        1,
        "the Guaranteed container gets one exclusive CPU"
    );
    assert_eq!(gr.cfs_quota, -1);
    let shrunk = cri
        .wait_cpus(&b, &all.difference(&gr.cpus).to_string())
        .await;
    assert_eq!(
        shrunk.cpus,
        all.difference(&gr.cpus),
        "the node shared pool shrank in the running container"
    );
    assert_eq!(shrunk.cpus_allowed, shrunk.cpus);

    cri.stop_pod(&gsb).await.unwrap();
    cri.remove_pod(&gsb).await.unwrap();
    let grown = cri.wait_cpus(&b, &all.to_string()).await;
    assert_eq!(grown.cpus, all, "and grew back when the exclusive pod left");
}

/// kill -9 of numa-shim after RunPodSandbox and again after CreateContainer: the same
/// placements afterwards, and nothing granted twice.
#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn crash_after_sandbox_and_after_container_keeps_placements() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let mut shim = Shim::start(&env, "crash", POD_SCOPE, &["--pod-knowledge", "cri"]).await;
    let mut cleanup = Cleanup::new(&env);

    let first = PodDef::new("first", resources(Some(1000), Some(1000), Some(128 * MI)));
    let sb1 = shim.cri().await.run_pod(&env, &first).await.unwrap();
    cleanup.sandboxes.push(sb1.clone());
    shim.restart().await; // crash after RunPodSandbox
    let cri = shim.cri().await;
    let c1 = cri
        .start_container(
            &env,
            &first,
            &sb1,
            "c",
            resources(Some(1000), Some(1000), Some(128 * MI)),
        )
        .await
        .unwrap();
    let r1 = cri.applied(&c1).await;
    assert_eq!(
        r1.cpus.len(),
        1,
        "the reservation survived the crash: {r1:?}"
    );
    // CRI-only inference cannot tell this container from one without resources (rule C2 in
    // docs/pod-knowledge.md): only the CPUs are checked here, not the quota.

    shim.restart().await; // crash after CreateContainer
    let cri = shim.cri().await;
    assert_eq!(
        cri.applied(&c1).await.cpus,
        r1.cpus,
        "the running container was not moved"
    );
    let (_, c2) = cri.one_cpu_pod(&env, "second", &mut cleanup).await;
    let r2 = cri.applied(&c2).await;
    assert_eq!(r2.cpus.len(), 1);
    assert!(
        r2.cpus.is_disjoint(&r1.cpus),
        "no CPU granted twice: {r1:?} {r2:?}"
    );

    // Both CPUs are now exclusive: a third exclusive pod must be refused, not double-booked.
    let third = PodDef::new("third", resources(Some(1000), Some(1000), Some(128 * MI)));
    let err = cri.run_pod(&env, &third).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
}

/// The checkpoint deleted while pods run: numa-shim rebuilds from the runtime (its annotations)
/// without moving anything, and still never grants a held CPU.
#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn deleted_checkpoint_is_rebuilt_from_the_runtime() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let mut shim = Shim::start(&env, "rebuild", POD_SCOPE, &["--pod-knowledge", "cri"]).await;
    let mut cleanup = Cleanup::new(&env);
    let cri = shim.cri().await;
    let (_, c) = cri.one_cpu_pod(&env, "held", &mut cleanup).await;
    let held = cri.applied(&c).await;

    shim.kill9();
    std::fs::remove_file(shim.state_dir.join("numa-shim-state.json")).unwrap();
    shim.restart().await;
    assert!(
        shim.log_text()
            .contains("rebuilding state from the runtime"),
        "{}",
        shim.log_text()
    );
    let cri = shim.cri().await;
    assert_eq!(cri.applied(&c).await.cpus, held.cpus, "nothing moved");
    let (_, c2) = cri.one_cpu_pod(&env, "other", &mut cleanup).await;
    assert!(
        cri.applied(&c2).await.cpus.is_disjoint(&held.cpus),
        "the adopted CPU is never granted again"
    );
}

/// The runtime (containerd or CRI-O) stopped and restarted under numa-shim: running containers
/// keep their cpusets, numa-shim answers UNAVAILABLE while it is down and places pods again when
/// it is back.
#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn containerd_restart_under_numa_shim() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let shim = Shim::start(&env, "rtrestart", POD_SCOPE, &["--pod-knowledge", "cri"]).await;
    let mut cleanup = Cleanup::new(&env);
    let cri = shim.cri().await;
    let (_, c) = cri.one_cpu_pod(&env, "survivor", &mut cleanup).await;
    let before = cri.applied(&c).await;

    restart_containerd(&env, || async {
        let err = cri.version().await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    })
    .await;

    assert_eq!(
        cri.applied(&c).await.cpus,
        before.cpus,
        "the container kept its cpuset"
    );
    let (_, c2) = cri.one_cpu_pod(&env, "after", &mut cleanup).await;
    assert!(cri.applied(&c2).await.cpus.is_disjoint(&before.cpus));
}

/// The kubelet (a static CPU manager left on, or a resize) sends its own cpuset: numa-shim keeps
/// its own for the containers it placed.
#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn kubelet_cpuset_updates_are_kept_to_numa_shims_cpuset() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let shim = Shim::start(&env, "update", POD_SCOPE, &["--pod-knowledge", "cri"]).await;
    let cri = shim.cri().await;
    let mut cleanup = Cleanup::new(&env);
    let (first, c) = cri.one_cpu_pod(&env, "pinned", &mut cleanup).await;
    let placed = cri.applied(&c).await;
    cri.update_cpuset(&c, &all_cpus().to_string())
        .await
        .unwrap();
    assert_eq!(cri.applied(&c).await.cpus, placed.cpus);

    // Changed behind numa-shim's back (straight at containerd): the drift check restores it.
    let direct = Cri::connect(&env.containerd).await;
    direct
        .update_cpuset(&c, &all_cpus().to_string())
        .await
        .unwrap();
    let restored = cri.wait_cpus(&c, &placed.cpus.to_string()).await;
    assert_eq!(
        restored.cpus,
        placed.cpus,
        "drift corrected; log:\n{}",
        shim.log_text()
    );

    // An exclusive CPU (1 of a 2-CPU budget: its own resources, C3) has its quota lifted; a
    // quota put on it straight at containerd is lifted again by the drift check. (Its
    // cpuset.mems cannot drift on this one-node host: 0 is the only node; tests/e2e/drift.rs
    // covers mems.)
    // The first pod goes: this machine has two CPUs to give.
    cri.stop_pod(&first).await.unwrap();
    cri.remove_pod(&first).await.unwrap();
    let two = resources(Some(2000), Some(2000), Some(256 * MI));
    let pod = PodDef::new("lifted", two);
    let sandbox = cri.run_pod(&env, &pod).await.unwrap();
    cleanup.sandboxes.push(sandbox.clone());
    let one = resources(Some(1000), Some(1000), Some(128 * MI));
    let x = cri
        .start_container(&env, &pod, &sandbox, "x", one)
        .await
        .unwrap();
    let lifted = cri.applied(&x).await;
    assert_eq!((lifted.cpus.len(), lifted.cfs_quota), (1, -1), "{lifted:?}");
    direct.update_quota(&x, 50_000).await.unwrap();
    assert_eq!(
        cri.applied(&x).await.cfs_quota,
        50_000,
        "containerd applied it"
    );
    let restored = cri.wait_quota(&x, -1).await;
    assert_eq!(
        (restored.cfs_quota, &restored.cpus),
        (-1, &lifted.cpus),
        "quota lifted again; log:\n{}",
        shim.log_text()
    );
    assert!(
        shim.log_text().contains("cfs_quota"),
        "the drift is logged: {}",
        shim.log_text()
    );
}

/// Runtimes [`restart_containerd`] started in this process (children to reap).
static RESTARTED: std::sync::Mutex<Vec<std::process::Child>> = std::sync::Mutex::new(Vec::new());

/// Stops the harness's runtime (by the PID it recorded), runs `while_down`, starts it again
/// with the same command (IT_RUN/runtime.argv when the harness wrote one: CRI-O runs inside a
/// wrapper its own command line does not show) and waits until it answers.
async fn restart_containerd<F, Fut>(env: &Env, while_down: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let pid_file = env.run.join(format!("pids/{}", env.runtime));
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let cmdline = std::fs::read(env.run.join("runtime.argv"))
        .unwrap_or_else(|_| std::fs::read(format!("/proc/{pid}/cmdline")).unwrap());
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .unwrap();
    // A runtime an earlier test of this process restarted is this process's child: reaped here,
    // or it would stay a zombie (and /proc/<pid> with it) until the test binary exits.
    let ours = {
        let mut restarted = RESTARTED.lock().unwrap();
        let at = restarted.iter().position(|c| c.id() == pid);
        at.map(|i| restarted.swap_remove(i))
    };
    if let Some(mut child) = ours {
        tokio::task::spawn_blocking(move || child.wait())
            .await
            .unwrap()
            .unwrap();
    }
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    while_down().await;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        // The harness's log of the runtime (a link into integration/.work), kept after teardown.
        .open(env.run.join("runtime.log"))
        .unwrap();
    // The restarted runtime outlives this test; the harness's teardown ends it by the PID
    // recorded below, as it would the original, and a later restart reaps it (RESTARTED).
    let child = std::process::Command::new(&args[0])
        .args(&args[1..])
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    std::fs::write(&pid_file, child.id().to_string()).unwrap();
    RESTARTED.lock().unwrap().push(child);
    let direct = Cri::connect(&env.containerd).await;
    for _ in 0..300 {
        if direct.version().await.is_ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{} did not come back", env.runtime);
}
