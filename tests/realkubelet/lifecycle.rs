//! A refused pod, restarts of the kubelet and numa-shim, the kubelet's fit check and the Pods API
//! appearing after numa-shim started: the lifecycle defects the real kubelet showed.

use std::collections::BTreeMap;

use super::*;

/// A refused pod never ends through CRI (the kubelet retries RunPodSandbox every 10-15 s); each
/// retry is answered without deciding again, the refusal is counted once as an allocation error,
/// shown with the kubelet's reason and message in inspect and metrics, and costs no checkpoint
/// write.
#[tokio::test]
#[ignore = "needs the real-kubelet harness (integration/test-all.sh)"]
async fn a_refused_pod_is_retried_cheaply_and_shown_with_its_reason() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let rig = rig(&env, "refused", Mode::NumaShim, &settings("pod")).await;
    rig.kubelet
        .add("empty.yaml", &pods::empty_shared_pool(&env.image));
    let first = wait_refusals(&rig.shim, "empty-shared-pool", 1).await;
    let at_first = rig.shim.metrics_text();
    let writes = sample(&at_first, "numa_shim_checkpoint_writes_total ");
    let later = wait_refusals(&rig.shim, "empty-shared-pool", 3).await;
    eprintln!("refusal: {later}");
    assert_eq!(later["reason"], "TopologyAffinityError");
    assert_eq!(
        later["message"],
        "Pod Scope pod with pod-level resources failed admission under pod-scope topology manager"
    );
    assert_eq!(later["firstRefused"], first["firstRefused"]);
    let metrics = rig.shim.metrics_text();
    // What a retried RunPodSandbox costs inside numa-shim (debug build): the calls after the
    // first refusal.
    let sum = "numa_shim_relay_shim_duration_seconds_sum{method=\"RunPodSandbox\"}";
    let count = "numa_shim_relay_shim_duration_seconds_count{method=\"RunPodSandbox\"}";
    let spent = sample(&metrics, sum) - sample(&at_first, sum);
    let calls = sample(&metrics, count) - sample(&at_first, count);
    eprintln!(
        "RunPodSandbox retries: {calls} calls, {:.3} ms each inside numa-shim",
        spent / calls * 1000.0
    );
    let series = metrics
        .lines()
        .find(|l| l.starts_with("numa_shim_pod_refusals_total{"))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(
        series.contains("reason=\"TopologyAffinityError\""),
        "{series}"
    );
    assert!(
        series.contains("message=\"Pod Scope pod with pod-level resources failed admission under pod-scope topology manager\""),
        "{series}"
    );
    if env.has_pods_api() {
        assert!(
            calls >= 2.0 && spent / calls < 0.005,
            "{spent} s for {calls} calls"
        );
        // Refused at RunPodSandbox: each retry replayed, counted once as the kubelet would.
        assert_eq!(
            sample(
                &metrics,
                "resource_manager_allocation_errors_total{resource_name=\"cpu\",source=\"pod\"}"
            ),
            1.0
        );
        assert_eq!(
            sample(&metrics, "numa_shim_checkpoint_writes_total "),
            writes,
            "a refusal writes nothing"
        );
        let warnings = rig
            .shim
            .log_text()
            .lines()
            .filter(|l| l.contains("WARN") && l.contains("refused"))
            .count();
        assert_eq!(warnings, 1, "one warning for the pod, not one per retry");
        // The kubelet: Pending, the reason in its log; the table names it.
        let pod = rig.kubelet.pod_named("empty-shared-pool").unwrap();
        assert_eq!(pod["status"]["phase"], "Pending");
        assert!(rig.kubelet.log_text().contains(
            "TopologyAffinityError: Pod Scope pod with pod-level resources failed admission under pod-scope topology manager"
        ));
    } else {
        // Inferred: refused at main-app's CreateContainer; the kubelet shows the reason in the
        // container's status.
        let pod = rig.kubelet.pod_named("empty-shared-pool").unwrap();
        let main = pod["status"]["containerStatuses"][0]["state"]["waiting"].clone();
        assert_eq!(main["reason"], "CreateContainerError", "{pod}");
        assert!(
            main["message"]
                .as_str()
                .unwrap_or_default()
                .contains("TopologyAffinityError"),
            "{main}"
        );
    }
    let table = std::process::Command::new(env!("CARGO_BIN_EXE_numa-shim"))
        .args([
            "inspect",
            "--endpoint",
            &format!("http://{}", rig.shim.metrics),
        ])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    eprintln!("{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("default/empty-shared-pool")
                && l.contains("TopologyAffinityError")),
        "{table}"
    );
}

/// Removing manifests, restarting the kubelet and killing numa-shim under a running kubelet:
/// no container restarts, every placement kept; the kubelet recovers by itself once numa-shim is
/// back (started again as systemd would); pods started afterwards are placed; the Pods API is
/// lost with the kubelet and picked up again.
#[tokio::test]
#[ignore = "needs the real-kubelet harness (integration/test-all.sh)"]
async fn restarts_of_the_kubelet_and_numa_shim_keep_every_placement() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let mut rig = rig(&env, "restarts", Mode::NumaShim, &settings("pod")).await;
    rig.kubelet
        .add("best-effort.yaml", &pods::best_effort(&env.image));
    rig.kubelet
        .add("demo.yaml", &pods::pod_level_resource_demo(&env.image));
    rig.kubelet
        .wait_running(&["best-effort", "pod-level-resource-demo"], &[])
        .await;
    wait_cpus(&env, &rig.kubelet, "best-effort", "0").await;
    let before = kernel(&env, &rig.kubelet).await;
    let ids = |k: &Kubelet| -> BTreeMap<String, _> {
        k.pods()
            .iter()
            .map(|p| (short_name(p), restarts(p)))
            .collect()
    };
    let ids_before = ids(&rig.kubelet);

    rig.kubelet.restart();
    rig.kubelet
        .wait_running(&["best-effort", "pod-level-resource-demo"], &[])
        .await;
    assert_eq!(
        ids(&rig.kubelet),
        ids_before,
        "a kubelet restart restarts no container"
    );
    assert_eq!(
        kernel(&env, &rig.kubelet).await,
        before,
        "and moves nothing"
    );
    if env.has_pods_api() {
        // The kubelet makes its socket again a few seconds after it starts ("Kubelet is
        // initializing" until then); the watcher retries every 2 s at most.
        let connected = || rig.shim.log_text().matches("pods api connected").count();
        let deadline = Instant::now() + Duration::from_secs(20);
        while connected() < 2 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let log = rig.shim.log_text();
        assert!(
            connected() >= 2,
            "the Pods API is picked up again:\n{}",
            tail(&log, 40)
        );
        assert!(log.contains("pods api lost"), "and its loss was noticed");
    }

    rig.shim.kill9();
    // The kubelet keeps calling: its calls fail while numa-shim is away.
    tokio::time::sleep(Duration::from_secs(5)).await;
    rig.shim.restart().await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(
        ids(&rig.kubelet),
        ids_before,
        "no container restarted after kill -9"
    );
    assert_eq!(kernel(&env, &rig.kubelet).await, before, "same placements");

    // The kubelet recovered by itself: a pod started now is placed, and removing one moves
    // the shared pool.
    rig.kubelet.remove("demo.yaml");
    rig.kubelet
        .wait_running(&["best-effort"], &["pod-level-resource-demo"])
        .await;
    let be = wait_cpus(&env, &rig.kubelet, "best-effort", "0-1").await;
    assert_eq!(
        be["app"].cpus, "0-1",
        "the released CPU joins the shared pool"
    );
    rig.kubelet
        .add("guaranteed.yaml", &pods::guaranteed(&env.image));
    rig.kubelet
        .wait_running(&["best-effort", "guaranteed"], &[])
        .await;
    let g = wait_cpus(&env, &rig.kubelet, "guaranteed", "1").await;
    assert_eq!(g["app"].cpus, "1", "{g:?}");
    let be = wait_cpus(&env, &rig.kubelet, "best-effort", "0").await;
    assert_eq!(be["app"].cpus, "0", "{be:?}");
    let log = rig.kubelet.log_text();
    assert!(
        log.contains("rpc error")
            || log.contains("connection refused")
            || log.contains("Unavailable"),
        "the kubelet saw numa-shim go away"
    );
}

/// With its managers off the kubelet still counts requests against its allocatable: a kubelet
/// that does not reserve the CPU numa-shim reserves admits a 2-CPU pod numa-shim must refuse
/// (Pending for ever), and check-config says so; with the reservation mirrored, the kubelet
/// refuses the pod itself (OutOfcpu, Failed) as a kubelet with its own managers would.
#[tokio::test]
#[ignore = "needs the real-kubelet harness (integration/test-all.sh)"]
async fn the_kubelets_fit_check_needs_numa_shims_reservation_mirrored() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    // numa-shim's own settings reserve CPU 0; the kubelet's file reserves nothing.
    let shim_settings = env.fresh("fit-shim-settings").join("numa-shim.yaml");
    let own = settings("pod");
    let own = own
        .lines()
        .filter(|l| !l.starts_with("apiVersion") && !l.starts_with("kind"))
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&shim_settings, own).unwrap();
    for (name, kubelet_settings, mirrored) in [
        ("fit", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n", false),
        (
            "fit-mirrored",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nreservedSystemCPUs: \"0\"\n",
            true,
        ),
    ] {
        let main = env.fresh(name).join("kubelet.yaml");
        std::fs::write(&main, kubelet_settings).unwrap();
        let socket = env.dir(&format!("shim-{name}")).join("cri.sock");
        let endpoint = format!("unix://{}", socket.display());
        let main = main.display().to_string();
        let options: Vec<String> = ["--config", &main, "--runtime", &endpoint]
            .map(String::from)
            .to_vec();
        let mut kubelet = Kubelet::configure(&env, name, &options);
        let check = std::process::Command::new(env!("CARGO_BIN_EXE_numa-shim"))
            .arg("check-config")
            .arg("--config")
            .arg(&shim_settings)
            .arg("--kubelet-config")
            .arg(kubelet.fact("config"))
            .arg("--kubelet-config-dir")
            .arg(kubelet.fact("config_dir"))
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&check.stdout).into_owned();
        eprintln!("check-config ({name}):\n{report}");
        assert_eq!(check.status.success(), mirrored, "{report}");
        if !mirrored {
            assert!(report.contains("reservedSystemCPUs: \"0\""), "{report}");
        }
        let shim = Shim::start(
            &env,
            name,
            &[
                "--config".into(),
                shim_settings.display().to_string(),
                "--kubelet-config".into(),
                kubelet.fact("config").into(),
                "--kubelet-config-dir".into(),
                kubelet.fact("config_dir").into(),
                "--pods-api-socket".into(),
                kubelet.fact("pods_api").into(),
            ],
        )
        .await;
        kubelet.run();
        kubelet.add("two-cpus.yaml", &pods::two_cpus(&env.image));
        if mirrored {
            // The kubelet's own fit check refuses it. A static pod is critical, so the kubelet
            // first tries to preempt and reports that: UnexpectedAdmissionError naming cpu
            // (an API pod gets OutOfcpu).
            let pod = wait_phase(&kubelet, "two-cpus", "Failed").await;
            let status = &pod["status"];
            let message = status["message"].as_str().unwrap_or_default();
            assert!(
                status["reason"] == "OutOfcpu"
                    || status["reason"] == "UnexpectedAdmissionError" && message.contains("res: cpu"),
                "{pod}"
            );
            assert!(shim.placement()["refused"].is_null(), "numa-shim never saw it");
        } else {
            let refused = wait_refusals(&shim, "two-cpus", 2).await;
            eprintln!("numa-shim refuses what the kubelet admitted: {refused}");
            assert_eq!(kubelet.pod_named("two-cpus").unwrap()["status"]["phase"], "Pending");
            assert!(shim.log_text().contains("THE KUBELET IS NOT SET UP FOR NUMA-SHIM"));
        }
        drop(kubelet);
        drop(shim);
    }
}

/// numa-shim starts before the kubelet, whose Pods API socket does not exist yet: without
/// `podKnowledge` it must pick the socket up when it appears and take pod specs from it (only
/// the flags older numa-shim builds know, so NUMA_SHIM_IT_BIN can run this against one).
#[tokio::test]
#[ignore = "needs the real-kubelet harness (integration/test-all.sh)"]
async fn the_pods_api_is_used_when_the_kubelet_starts_after_numa_shim() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    if !env.has_pods_api() {
        eprintln!("kubelet {} has no Pods API", env.version);
        return;
    }
    let main = env.fresh("pods-api").join("kubelet.yaml");
    std::fs::write(&main, settings("pod")).unwrap();
    let socket = env.dir("shim-pods-api").join("cri.sock");
    let endpoint = format!("unix://{}", socket.display());
    let gates = if env.minor() == 36 {
        "featureGates: {PodsAPI: true}\n"
    } else {
        ""
    };
    let off = drop_in(
        &env,
        "pods-api",
        "10-numa-shim.conf",
        &format!("cpuManagerPolicy: none\nmemoryManagerPolicy: None\ntopologyManagerPolicy: none\n{gates}"),
    );
    let main = main.display().to_string();
    let options: Vec<String> = ["--config", &main, "--drop-in", &off, "--runtime", &endpoint]
        .map(String::from)
        .to_vec();
    let mut kubelet = Kubelet::configure(&env, "pods-api", &options);
    let shim = Shim::start(
        &env,
        "pods-api",
        &[
            "--kubelet-config".into(),
            main.clone(),
            "--pods-api-socket".into(),
            kubelet.fact("pods_api").into(),
        ],
    )
    .await;
    assert!(
        !kubelet.path("pods_api").exists(),
        "the kubelet has not made its socket yet"
    );
    kubelet.run();
    kubelet.add("mixed.yaml", &pods::pod_scope_mixed(&env.image));
    kubelet.wait_running(&["pod-scope-mixed"], &[]).await;
    let view = shim.placement();
    let pod = &view["pods"][0];
    assert_eq!(pod["source"], "pods-api", "{pod}");
    assert_eq!(view["podKnowledge"][0]["link"], "live", "{view}");
}
