//! Test support: a registry on a synthetic 2-NUMA machine with the static CPU and memory
//! policies, pods admitted and containers created the way the lifecycle hook records them, and a
//! PodResources server on a unix socket in a temp dir. Used by tests/podresources, tests/relay
//! and the PodResources benchmark.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::cpuset::CpuSet;
use crate::knowledge::Knowledge;
use crate::lifecycle::{Placer, Registry, Source, Store};
use crate::placement::config::{
    Config, CpuPolicy, MemoryPolicy, ReservedCpus, ReservedMemory, TopologyPolicy, TopologyScope,
};
use crate::placement::node::Node;
pub use crate::placement::test_pods::{app, guaranteed, plrm_pod, pod_of, GI};
use crate::placement::{PodSpec, ResourceList, Resources};
use crate::podresources::{self, Options, PodResourcesService};
use crate::proto::podresources::v1::pod_resources_lister_client::PodResourcesListerClient;
use crate::state::Checkpoint;
use crate::telemetry::Metrics;
use crate::topology::SyntheticSpec;
use crate::transport::unix_channel;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

pub type Shared = Arc<Mutex<Registry>>;

pub fn burstable(cpu_milli: u64) -> Resources {
    Resources {
        requests: ResourceList {
            cpu_milli: Some(cpu_milli),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// `sockets` NUMA nodes of `cores` CPUs each (no SMT), static policies, 1Gi reserved per node.
pub fn registry_on(sockets: u32, cores: u32, scope: TopologyScope) -> Registry {
    let topo = SyntheticSpec::new(sockets, 1, cores, 1, 1).build().unwrap();
    let reserved = (0..sockets)
        .map(|numa_node| ReservedMemory {
            numa_node,
            memory: GI,
            hugepages: BTreeMap::new(),
        })
        .collect();
    let config = Config {
        cpu_policy: CpuPolicy::Static,
        reserved_cpus: ReservedCpus::Explicit(CpuSet::new()),
        accept_no_reserved_cpus: true,
        memory_policy: MemoryPolicy::Static,
        reserved_memory: reserved,
        topology_policy: TopologyPolicy::BestEffort,
        topology_scope: scope,
        ..Config::default()
    };
    Registry::new(Node::new(topo, config).unwrap())
}

pub fn registry() -> Registry {
    registry_on(2, 8, TopologyScope::Pod)
}

/// A placer (the serve wiring: epoch-counted registry) around `registry`, checkpointing into
/// `dir`.
pub fn placer(registry: Registry, dir: &Path) -> Arc<Placer> {
    placer_with(registry, dir, Arc::new(Metrics::new()))
}

/// [`placer`] counting in `metrics` (which a relay can share).
pub fn placer_with(registry: Registry, dir: &Path, metrics: Arc<Metrics>) -> Arc<Placer> {
    let store = Store::new(Checkpoint::new(dir, "state.json"));
    Arc::new(Placer::new(registry, store, Knowledge::CriOnly, metrics))
}

/// Admits the pod and creates each of its containers (ids `<uid>-<name>`); false if refused.
pub fn run(registry: &mut Registry, spec: PodSpec) -> bool {
    let uid = spec.uid.clone();
    let names: Vec<String> = spec
        .init_containers
        .iter()
        .chain(&spec.containers)
        .map(|c| c.name.clone())
        .collect();
    if registry.admit(spec, Source::Spec).is_err() {
        return false;
    }
    let sandbox = format!("sb-{uid}");
    registry.commit_sandbox(&uid, &sandbox);
    for name in names {
        let d = registry
            .decide_container(&sandbox, &name, |_| unreachable!())
            .unwrap()
            .unwrap();
        registry.commit_container(&format!("{uid}-{name}"), &sandbox, &name, &d);
    }
    true
}

/// Stops and removes the pod's sandbox.
pub fn remove(registry: &mut Registry, uid: &str) {
    let sandbox = format!("sb-{uid}");
    registry.stop_sandbox(&sandbox);
    registry.remove_sandbox(&sandbox);
}

/// A PodResources server on `<dir>/numa-shim.sock`.
pub struct Served {
    pub path: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Served {
    pub async fn start<S: podresources::RegistrySource>(
        dir: &Path,
        registry: S,
        mut options: Options,
    ) -> Self {
        let path = dir.join("numa-shim.sock");
        options.socket = path.clone();
        let socket = crate::listen::SocketOptions {
            mode: options.mode,
            group: None,
        };
        let listener = crate::listen::bind(&path, socket).await.unwrap().listener;
        let service = PodResourcesService::new(registry, &options);
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            podresources::serve(listener, service, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        Self {
            path,
            stop: Some(tx),
            task,
        }
    }

    pub fn client(&self) -> PodResourcesListerClient<Channel> {
        PodResourcesListerClient::new(unix_channel(&self.path))
            .max_decoding_message_size(podresources::MAX_MESSAGE)
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// Options without the kubelet and with a rate limit that never bites.
pub fn options() -> Options {
    let mut o = Options::new(PathBuf::from("unused"));
    o.kubelet_socket = None;
    o.qps = 1_000_000;
    o.burst = 1_000_000;
    o
}

/// A set from PodResources cpu ids.
pub fn ids(v: &[i64]) -> CpuSet {
    let mut s = CpuSet::new();
    for &i in v {
        s.insert(u32::try_from(i).unwrap());
    }
    s
}
