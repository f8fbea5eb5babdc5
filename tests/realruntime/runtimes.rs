//! Where the runtimes differ in what numa-shim depends on, checked on the runtime under test
//! (NUMA_SHIM_IT_RUNTIME): the cgroup a container lands in, what becomes of the pod's
//! `LinuxPodSandboxConfig.resources`, and numa-shim's warnings about CRI-O settings that fight
//! it over cpusets (read from CRI-O's own Status answer and from its files).

use std::time::{Duration, Instant};

use numa_shim::cgroup::Host;
use numa_shim::cpuset::CpuSet;
use numa_shim::proto::cri::v1 as cri;
use numa_shim::proto::cri::v1::runtime_service_client::RuntimeServiceClient;
use numa_shim::transport::unix_channel;

use crate::support::*;

/// The verbose PodSandboxStatus `info["info"]` JSON, straight from the runtime.
async fn sandbox_info(env: &Env, id: &str) -> serde_json::Value {
    let mut client = RuntimeServiceClient::new(unix_channel(&env.containerd));
    let status = client
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    serde_json::from_str(&status.info["info"]).unwrap()
}

/// A container's cgroup is `<parent>/crio-<id>` on CRI-O (cgroupfs) and `<parent>/<id>` on
/// containerd; numa-shim finds it through /proc/<pid>/cgroup either way (drift check, tests).
#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn container_cgroups_are_named_as_the_runtime_names_them() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let shim = Shim::start(&env, "cgname", POD_SCOPE, &["--pod-knowledge", "cri"]).await;
    let cri = shim.cri().await;
    let mut cleanup = Cleanup::new(&env);
    let pod = PodDef::new("cgname", resources(Some(1000), Some(1000), Some(128 * MI)));
    let sandbox = cri.run_pod(&env, &pod).await.unwrap();
    cleanup.sandboxes.push(sandbox.clone());
    let c = cri
        .start_container(
            &env,
            &pod,
            &sandbox,
            "c",
            resources(Some(1000), Some(1000), Some(128 * MI)),
        )
        .await
        .unwrap();
    let reading = cri.applied(&c).await;
    let name = match env.runtime.as_str() {
        "crio" => format!("crio-{c}"),
        _ => c.clone(),
    };
    let parent = format!("{}/pod{}", env.cgroup_parent, pod.uid);
    assert!(
        reading
            .cpuset_dir
            .ends_with(format!("{}/{name}", parent.trim_start_matches('/'))),
        "{}: {reading:?}",
        env.runtime
    );
    assert_eq!(reading.cpus.len(), 1, "placed: {reading:?}");
}

/// Neither runtime applies the pod's `LinuxPodSandboxConfig.resources` to the pod: the infra
/// container (CRI-O creates one for a pod with its own PID namespace) runs without the pod's CPU
/// quota, which only the kubelet's own pod cgroup enforces. Both get the values numa-shim
/// forwarded unchanged: containerd keeps them in the sandbox's config, CRI-O as the
/// `pod-linux-resources.crio.io` annotation of the infra container.
#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn sandbox_resources_reach_the_runtime_but_are_not_applied() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let shim = Shim::start(&env, "sbres", POD_SCOPE, &["--pod-knowledge", "cri"]).await;
    let cri = shim.cri().await;
    let mut cleanup = Cleanup::new(&env);
    let pod = PodDef::new("sbres", resources(Some(2000), Some(2000), Some(256 * MI)));
    let sandbox = cri.run_pod(&env, &pod).await.unwrap();
    cleanup.sandboxes.push(sandbox.clone());

    let info = sandbox_info(&env, &sandbox).await;
    let forwarded: serde_json::Value = match env.runtime.as_str() {
        "crio" => {
            let annotation = info["runtimeSpec"]["annotations"]["pod-linux-resources.crio.io"]
                .as_str()
                .unwrap_or_else(|| panic!("no pod-linux-resources.crio.io: {info}"));
            serde_json::from_str(annotation).unwrap()
        }
        _ => info["config"]["linux"]["resources"].clone(),
    };
    assert_eq!(forwarded["cpu_quota"], 200_000, "{}: {info}", env.runtime);
    assert_eq!(forwarded["cpu_shares"], 2048, "{}: {info}", env.runtime);
    assert_eq!(
        forwarded["memory_limit_in_bytes"],
        256 * MI,
        "{}: {info}",
        env.runtime
    );

    let pid = info["pid"].as_u64().expect("the infra container runs") as u32;
    let infra = Host::default().read_pid(pid).unwrap();
    assert_eq!(
        infra.cfs_quota, -1,
        "{}: the infra container has no quota from the sandbox resources: {infra:?}",
        env.runtime
    );
    let spec_quota = &info["runtimeSpec"]["linux"]["resources"]["cpu"]["quota"];
    assert!(spec_quota.is_null(), "{}: {spec_quota}", env.runtime);
}

/// numa-shim warns at start about the CRI-O settings that fight it over cpusets. The harness's
/// CRI-O runs with a workload, shared_cpuset and a runtime handler allowing CPU annotations
/// (integration/lib/crio.sh): each is warned about once, seen both in CRI-O's Status answer and in
/// its files (`--crio-config`), so numa-shim reads the files as CRI-O does. On containerd nothing
/// is warned about.
#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn crio_settings_that_fight_numa_shim_are_warned_about() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let conf = env.run.join("crio.conf");
    let conf_arg = conf.display().to_string();
    let extra: Vec<&str> = match env.runtime.as_str() {
        "crio" => vec!["--pod-knowledge", "cri", "--crio-config", &conf_arg],
        _ => vec!["--pod-knowledge", "cri"],
    };
    // This start's lines: the log file is kept across runs in one harness, and the check starts
    // before the relay binds, so it can log before "numa-shim serving" (seen on containerd 2.4.2,
    // whose Status answered first: the line was cut off and the test waited in vain).
    let from = std::fs::metadata(env.run.join("shim-criowarn/numa-shim.log"))
        .map_or(0, |m| m.len() as usize);
    let shim = Shim::start(&env, "criowarn", POD_SCOPE, &extra).await;
    let this_run = || shim.log_text().get(from..).unwrap_or_default().to_string();
    let done = |log: &str| {
        log.contains("no CRI-O setting fights numa-shim")
            || log.contains("runtime status has no CRI-O configuration")
            || log.matches("CRI-O setting fights numa-shim").count() >= 3
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(&this_run()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = this_run();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CRI-O setting fights numa-shim"))
        .collect();
    if env.runtime != "crio" {
        assert!(warnings.is_empty(), "{log}");
        assert!(
            log.contains("runtime status has no CRI-O configuration"),
            "{log}"
        );
        return;
    }
    assert_eq!(warnings.len(), 3, "{log}");
    let both = format!("CRI-O status, {conf_arg}");
    for (needle, line) in [
        ("[crio.runtime.workloads.numa-shim-it]", 0),
        (
            "runtime handler numa-shim-it-tuned allows cpu-quota.crio.io",
            1,
        ),
        ("shared_cpuset", 2),
    ] {
        assert!(
            warnings[line].contains(needle),
            "{needle}: {}",
            warnings[line]
        );
        assert!(
            warnings[line].contains(&both),
            "seen in CRI-O's answer and its files: {}",
            warnings[line]
        );
    }
}

/// Pool updates reach the running containers of a pod while others of the pod have exited (an
/// init container that finished, which the kubelet keeps until the pod goes) or were removed
/// behind numa-shim's back. containerd records a stopped container's cpuset and answers
/// NotFound for a removed one; CRI-O refuses both with Unknown ("is not running or created
/// state", "not found: ID does not exist"). Neither is a failure to retry: numa-shim asks the
/// runtime what became of the container, and no "cpuset update failed" warning, retry or
/// back-off follows, on any drift round.
#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn pool_updates_skip_exited_and_removed_containers() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let shim = Shim::start(&env, "exited", POD_SCOPE, &["--pod-knowledge", "cri"]).await;
    let log_from = shim.log_text().len();
    let cri = shim.cri().await;
    let direct = Cri::connect(&env.containerd).await;
    let mut cleanup = Cleanup::new(&env);
    let pod = PodDef::new("exited", resources(Some(2000), Some(2000), Some(256 * MI)));
    let sandbox = cri.run_pod(&env, &pod).await.unwrap();
    cleanup.sandboxes.push(sandbox.clone());
    let pool = || resources(None, Some(2000), Some(256 * MI));
    let mut ids = Vec::new();
    for name in ["warmup", "removed", "proxy"] {
        let id = cri
            .start_container(&env, &pod, &sandbox, name, pool())
            .await
            .unwrap();
        ids.push(id);
    }
    cri.stop_container(&ids[0]).await.unwrap();
    direct.stop_container(&ids[1]).await.unwrap();
    direct.remove_container(&ids[1]).await.unwrap();

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
    let slice = cri.applied(&main).await.cpus;
    let rest = CpuSet::parse("0-1").unwrap().difference(&slice);
    let started = Instant::now();
    let proxy = cri.wait_cpus(&ids[2], &rest.to_string()).await;
    assert_eq!(
        proxy.cpus,
        rest,
        "the running sidecar moved; log:\n{}",
        shim.log_text()
    );
    let moved_in = started.elapsed();
    // Three drift rounds (1 s each), every one of which pushes what is still pending.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = shim.log_text()[log_from..].to_string();
    let failed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("cpuset update failed"))
        .collect();
    assert!(
        failed.is_empty(),
        "{}: {} failed updates (sidecar moved in {moved_in:?}):\n{}",
        env.runtime,
        failed.len(),
        failed.join("\n")
    );
    // Both were pushed to, and settled: the exited one applied (containerd) or dropped as
    // exited (CRI-O), the removed one dropped as gone.
    let settled = |id: &str, how: &[&str]| {
        log.lines()
            .any(|l| l.contains(&format!("container={id}")) && how.iter().any(|h| l.contains(h)))
    };
    let exited = ["cpuset updated", "gone=Exited"];
    assert!(settled(&ids[0], &exited), "{}: exited: {log}", env.runtime);
    assert!(
        settled(&ids[1], &["gone=Gone"]),
        "{}: removed: {log}",
        env.runtime
    );
}
