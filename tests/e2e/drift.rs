//! The drift check end to end: the fake runtime plays the kernel (a cgroup v1 tree per started
//! container, rewritten from each UpdateContainerResources), a test changes a container's
//! `cpuset.cpus`, `cpuset.mems` or CFS quota behind numa-shim's back, and numa-shim's periodic
//! check puts back what it decided — cpus always, mems where it set them, the quota where it
//! lifted it — and leaves alone what the kubelet decided (a shared container's quota).

use numa_shim::testing::e2e as support;

use std::time::Duration;

use numa_shim::cpuset::CpuSet;
use numa_shim::telemetry::ResourceName;
use support::harness::{Setup, Shim};
use support::kubelet::{pod_def, Res, GI};
use support::received;

const TWO: &str = "topoDualSocketHT";
const PERIOD: Duration = Duration::from_millis(100);

#[tokio::test]
async fn drifted_cpus_mems_and_lifted_quota_are_put_back() {
    let dir = tempfile::tempdir().unwrap();
    let setup =
        Setup::new(TWO, "single-numa-node", "pod").drift(&dir.path().join("kernel"), PERIOD);
    let shim = Shim::start(dir.path(), &setup).await;
    let kubelet = shim.kubelet().await;
    let web_def = pod_def("web")
        .pod_level(Res::guaranteed(4000, 4 * GI))
        .container("main", Res::guaranteed(2000, 2 * GI))
        .container("helper", Res::default());
    let web = kubelet.start_pod(&web_def).await.unwrap();
    let burst_def =
        pod_def("burst").container("app", Res::burstable(500, 1000, 256 << 20, 512 << 20));
    let burst = kubelet.start_pod(&burst_def).await.unwrap();
    let (main, app) = (web.id("main").to_string(), burst.id("app").to_string());
    let metrics = shim.started.placer.metrics();

    // What numa-shim decided is what the fake kernel applied.
    let decided = received(&shim.fake().created("web", "main"));
    assert_eq!(
        decided.quota, -1,
        "main holds an exclusive slice: quota lifted"
    );
    assert!(
        !decided.mems.is_empty(),
        "the Static memory manager set mems"
    );
    let mems = CpuSet::parse(&decided.mems).unwrap();
    let found = shim.fake().cgroup(&main);
    assert_eq!(
        (&found.cpus, &found.mems, found.cfs_quota),
        (&decided.cpus, &mems, -1)
    );

    // cpuset.mems moved to the other node: put back, counted as memory.
    let other = if decided.mems == "0" { "1" } else { "0" };
    shim.fake().change_cgroup(&main, "cpuset.mems", other);
    shim.eventually("main's mems are put back", |f| f.cgroup(&main).mems == mems)
        .await;
    assert_eq!(metrics.drift_corrections(ResourceName::Memory), 1);

    // A quota put on the exclusive slice: lifted again, counted as cpu; numa-shim's update
    // carries what it decided (cpus, mems, quota -1).
    shim.fake()
        .change_cgroup(&main, "cpu.cfs_quota_us", "100000");
    shim.eventually("main's quota is lifted again", |f| {
        f.cgroup(&main).cfs_quota == -1
    })
    .await;
    assert_eq!(metrics.drift_corrections(ResourceName::Cpu), 1);
    let last = shim.fake().updates_for(&main).last().unwrap().clone();
    let linux = last.linux.unwrap();
    assert_eq!(
        (
            linux.cpuset_cpus.as_str(),
            linux.cpuset_mems.as_str(),
            linux.cpu_quota
        ),
        (decided.cpus.to_string().as_str(), decided.mems.as_str(), -1)
    );

    // The shared container's quota is the kubelet's: numa-shim leaves a changed one alone.
    let app_updates = shim.fake().updates_for(&app).len();
    shim.fake()
        .change_cgroup(&app, "cpu.cfs_quota_us", "123000");
    tokio::time::sleep(PERIOD * 5).await;
    assert_eq!(shim.fake().cgroup(&app).cfs_quota, 123_000);
    assert_eq!(shim.fake().updates_for(&app).len(), app_updates);

    // Its cpus are numa-shim's (the node shared pool): put back, without a quota of its own.
    let shared = shim.fake().cgroup(&app).cpus;
    shim.fake().change_cgroup(&app, "cpuset.cpus", "0");
    shim.eventually("app's cpus are put back", |f| f.cgroup(&app).cpus == shared)
        .await;
    let linux = shim
        .fake()
        .updates_for(&app)
        .last()
        .unwrap()
        .clone()
        .linux
        .unwrap();
    assert_eq!((linux.cpuset_mems.as_str(), linux.cpu_quota), ("", 0));
    assert_eq!(metrics.drift_corrections(ResourceName::Cpu), 2);

    // Everything drifts at once: one correction per resource, all put back by one update.
    shim.fake()
        .change_cgroup(&main, "cpuset.cpus", &shared.to_string());
    shim.fake().change_cgroup(&main, "cpuset.mems", other);
    shim.fake()
        .change_cgroup(&main, "cpu.cfs_quota_us", "50000");
    shim.eventually("main is put back whole", |f| {
        let found = f.cgroup(&main);
        (found.cpus, found.mems, found.cfs_quota) == (decided.cpus.clone(), mems.clone(), -1)
    })
    .await;
    assert_eq!(metrics.drift_corrections(ResourceName::Cpu), 3);
    assert_eq!(metrics.drift_corrections(ResourceName::Memory), 2);
    shim.stop().await;
}
