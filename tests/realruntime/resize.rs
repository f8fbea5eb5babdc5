//! A thousand in-place resizes through a running numa-shim process in front of the real
//! runtime leak nothing (docs/resize.md §5): a classic Guaranteed container resized 500m → 1
//! CPU → 500m (node shared pool → an exclusive CPU → back), UpdateContainerResources as the
//! kubelet's CPU pass sends them. After the loop the kernel runs it where it ran before, the
//! checkpoint has its size again, and the process's resident memory (VmRSS) is within a bound
//! of where it was after a warm-up. Prints the numbers (a benchmark-style measurement);
//! `NUMA_SHIM_IT_RESIZES` sets another even count (default 1000) to see whether VmRSS grows
//! with the count; VmRSS is printed after every 1,000.

use std::time::Instant;

use super::support::*;

fn vm_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn a_thousand_resizes_through_the_process_leak_nothing() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let (shim, api) = Shim::with_pods_api(&env, "resize-loop", POD_SCOPE).await;
    let cri = shim.cri().await;
    let mut cleanup = Cleanup::new(&env);
    let pid = shim.pid().unwrap();

    let def = PodDef::new("loop", resources(Some(500), Some(500), Some(128 * MI)));
    api.add(&classic_pod(&def, "g", ("500m", "500m", "128Mi")));
    let sandbox = cri.run_pod(&env, &def).await.unwrap();
    cleanup.sandboxes.push(sandbox.clone());
    let g = cri
        .start_container(
            &env,
            &def,
            &sandbox,
            "g",
            resources(Some(500), Some(500), Some(128 * MI)),
        )
        .await
        .unwrap();
    let shared = cri.applied(&g).await;
    let checkpoint = shim.state_dir.join("numa-shim-state.json");
    let size = || std::fs::metadata(&checkpoint).map(|m| m.len()).unwrap_or(0);

    let cycle = |n: usize| {
        let (cri, g) = (cri.clone(), g.clone());
        async move {
            for _ in 0..n {
                cri.resize(&g, 1000, 128 * MI).await.unwrap();
                cri.resize(&g, 500, 128 * MI).await.unwrap();
            }
        }
    };
    // Warm-up: allocator arenas, the registry's first resize, the metrics series.
    cycle(20).await;
    let settled = cri.wait_cpus(&g, &shared.cpus.to_string()).await;
    assert_eq!(settled.cpus, shared.cpus);
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let (rss0, size0) = (vm_rss_kib(pid), size());

    let count: usize = std::env::var("NUMA_SHIM_IT_RESIZES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    assert!(
        count >= 2 && count.is_multiple_of(2),
        "an even count of resizes"
    );
    let started = Instant::now();
    // One grow, checked: an exclusive CPU, no quota.
    cri.resize(&g, 1000, 128 * MI).await.unwrap();
    let grown = cri.applied(&g).await;
    assert_eq!(grown.cpus.len(), 1, "exclusive: {grown:?}");
    assert_eq!(grown.cfs_quota, -1);
    cri.resize(&g, 500, 128 * MI).await.unwrap();
    // The rest in blocks of 1,000 resizes, VmRSS after each: a leak grows by the same amount
    // per block, an allocator settling by less and less.
    let mut left = count / 2 - 1;
    let mut series = vec![rss0];
    while left > 0 {
        let n = left.min(500);
        cycle(n).await;
        left -= n;
        series.push(vm_rss_kib(pid));
    }
    let took = started.elapsed();
    let back = cri.wait_cpus(&g, &shared.cpus.to_string()).await;
    assert_eq!(back.cpus, shared.cpus, "runs where it ran");
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let (rss1, size1) = (vm_rss_kib(pid), size());
    eprintln!(
        "{count} resizes in {:.1} s ({:.1} ms each): VmRSS {rss0} kB -> {rss1} kB ({:+} kB), \
         checkpoint {size0} -> {size1} bytes; VmRSS every 1,000 resizes (kB): {series:?}",
        took.as_secs_f64(),
        took.as_secs_f64() * 1000.0 / count as f64,
        rss1 as i64 - rss0 as i64
    );
    assert_eq!(size1, size0, "checkpoint back to its size");
    assert!(
        rss1 <= rss0 + 2048,
        "VmRSS grew {rss0} kB -> {rss1} kB over {count} resizes"
    );
}
