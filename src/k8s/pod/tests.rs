use super::*;

const GI: u64 = 1 << 30;

fn parse(yaml: &str) -> Pod {
    serde_yaml_ng::from_str(yaml).unwrap()
}

fn spec(yaml: &str) -> placement::PodSpec {
    parse(yaml).to_pod_spec().unwrap()
}

fn err(yaml: &str) -> String {
    parse(yaml).to_pod_spec().unwrap_err().to_string()
}

#[test]
fn reads_the_tutorial_pod_with_roles_and_pod_budget() {
    // examples/pod-scope-mixed.yaml, with the keys placement ignores left in.
    let p = spec(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: pod-scope-mixed, labels: {app: x}}
spec:
  resources:
    requests: {cpu: "4", memory: "4Gi"}
    limits: {cpu: "4", memory: "4Gi"}
  initContainers:
  - name: metrics-sidecar
    image: registry.k8s.io/pause:3.9
    restartPolicy: Always
  - name: setup
    image: busybox
  containers:
  - name: main-app
    image: registry.k8s.io/pause:3.9
    command: ["sh"]
    resources:
      requests: {cpu: "2", memory: "2Gi"}
      limits: {cpu: 2, memory: "2Gi"}
"#,
    );
    assert_eq!(p.name, "pod-scope-mixed");
    assert_eq!(p.namespace, "default");
    let budget = p.resources.unwrap();
    assert_eq!(budget.requests.cpu_milli, Some(4000));
    assert_eq!(budget.limits.memory, Some(4 * GI));
    let roles: Vec<_> = p
        .init_containers
        .iter()
        .map(|c| (c.name.as_str(), c.role))
        .collect();
    assert_eq!(
        roles,
        [
            ("metrics-sidecar", ContainerRole::Sidecar),
            ("setup", ContainerRole::Init)
        ]
    );
    assert_eq!(p.containers[0].role, ContainerRole::App);
    assert_eq!(p.containers[0].resources.requests.cpu_milli, Some(2000));
    assert_eq!(p.containers[0].resources.limits.cpu_milli, Some(2000));
    assert_eq!(
        p.init_containers[0].resources,
        placement::Resources::default()
    );
}

#[test]
fn container_limits_without_requests_default_the_requests() {
    let p = spec(
        "metadata: {name: a}\nspec:\n  containers:\n  - name: c\n    resources:\n      limits: {cpu: 1500m, memory: 1Gi}\n      requests: {memory: 512Mi}\n",
    );
    let r = &p.containers[0].resources;
    assert_eq!(r.requests.cpu_milli, Some(1500));
    assert_eq!(r.requests.memory, Some(512 << 20));
    assert!(p.resources.is_none());
}

#[test]
fn pod_limits_alone_default_pod_requests_to_the_limits() {
    let p = spec(
        "metadata: {name: a}\nspec:\n  resources: {limits: {cpu: 2, memory: 2Gi}}\n  containers:\n  - name: c\n",
    );
    let budget = p.resources.unwrap();
    assert_eq!(budget.requests.cpu_milli, Some(2000));
    assert_eq!(budget.requests.memory, Some(2 * GI));
}

#[test]
fn pod_requests_default_to_the_sidecar_aware_aggregate_of_container_requests() {
    // apps 1 + sidecar 1 = 2; regular init 3 after sidecar 1 = 4 → pod cpu request 4.
    // No container asks for memory, so the pod memory request comes from the pod limit.
    let p = spec(
        r#"
metadata: {name: a}
spec:
  resources: {limits: {cpu: 8, memory: 2Gi}}
  initContainers:
  - {name: s1, restartPolicy: Always, resources: {requests: {cpu: 1}}}
  - {name: i1, resources: {requests: {cpu: 3}}}
  containers:
  - {name: app, resources: {requests: {cpu: 1}}}
"#,
    );
    let budget = p.resources.unwrap();
    assert_eq!(budget.requests.cpu_milli, Some(4000));
    assert_eq!(budget.requests.memory, Some(2 * GI));
}

#[test]
fn pod_hugepage_limits_default_from_container_limits() {
    let p = spec(
        r#"
metadata: {name: a}
spec:
  resources: {requests: {cpu: 2, memory: 1Gi}, limits: {cpu: 2, memory: 1Gi}}
  containers:
  - {name: a, resources: {limits: {memory: 64Mi, hugepages-2Mi: 4Mi}}}
  - {name: b, resources: {limits: {memory: 64Mi, hugepages-2Mi: 2Mi}}}
"#,
    );
    let budget = p.resources.unwrap();
    assert_eq!(budget.limits.hugepages.get(&(2 << 20)), Some(&(6 << 20)));
    assert_eq!(budget.requests.hugepages.get(&(2 << 20)), Some(&(6 << 20)));
    assert_eq!(
        p.containers[0].resources.requests.hugepages.get(&(2 << 20)),
        Some(&(4 << 20))
    );
}

#[test]
fn pod_limits_default_only_when_every_container_has_one() {
    let p = spec(
        r#"
metadata: {name: a}
spec:
  resources: {requests: {cpu: 2, memory: 2Gi}}
  containers:
  - {name: a, resources: {limits: {cpu: 1, memory: 1Gi}}}
  - {name: b, resources: {limits: {cpu: 1}}}
"#,
    );
    let budget = p.resources.unwrap();
    assert_eq!(budget.limits.cpu_milli, Some(2000));
    assert_eq!(budget.limits.memory, None);
}

#[test]
fn unmanaged_resources_are_dropped() {
    let p = spec(
        "metadata: {name: a}\nspec:\n  containers:\n  - name: c\n    resources: {limits: {nvidia.com/gpu: 1, ephemeral-storage: 1Gi, cpu: 1}}\n",
    );
    let r = &p.containers[0].resources.limits;
    assert_eq!(r.cpu_milli, Some(1000));
    assert_eq!(r.memory, None);
    assert!(r.hugepages.is_empty());
}

#[test]
fn uid_is_kept_or_derived_stably_from_namespace_and_name() {
    let given = spec("metadata: {name: a, uid: 1234}\nspec: {containers: [{name: c}]}");
    assert_eq!(given.uid, "1234");
    let a1 = spec("metadata: {name: a, namespace: ns}\nspec: {containers: [{name: c}]}");
    let a2 = spec("metadata: {name: a, namespace: ns}\nspec: {containers: [{name: d}]}");
    let b = spec("metadata: {name: b, namespace: ns}\nspec: {containers: [{name: c}]}");
    assert_eq!(a1.uid, a2.uid);
    assert_ne!(a1.uid, b.uid);
    assert_eq!(a1.namespace, "ns");
    let parts: Vec<_> = a1.uid.split('-').map(str::len).collect();
    assert_eq!(parts, [8, 4, 4, 4, 12]);
    assert_eq!(&a1.uid[14..15], "8", "version nibble: {}", a1.uid);
}

#[test]
fn multi_document_files_load_every_pod() {
    let text = "kind: Pod\nmetadata: {name: a}\n---\n---\nkind: KubeletConfiguration\ncpuManagerPolicy: static\n---\nmetadata: {name: b}\n";
    let pods = Pod::all_from_yaml(text).unwrap();
    let names: Vec<_> = pods
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
}

#[test]
fn malformed_quantities_name_the_field() {
    let e = serde_yaml_ng::from_str::<Pod>(
        "metadata: {name: a}\nspec:\n  containers:\n  - name: c\n    resources: {limits: {cpu: abc}}\n",
    )
    .unwrap_err()
    .to_string();
    // The path stops at the map: the quantity's own message quotes the value.
    assert!(e.contains("spec.containers[0].resources.limits"), "{e}");
    assert!(e.contains("quantity \"abc\""), "{e}");
}

#[test]
fn rejected_pods_name_the_field_and_reason() {
    let c = "  containers:\n  - name: c\n";
    let cases: Vec<(String, &str)> = vec![
        ("kind: Deployment\nmetadata: {name: a}".into(), "kind \"Deployment\" is not a Pod"),
        ("metadata: {}\nspec: {containers: [{name: c}]}".into(), "metadata.name: required"),
        ("metadata: {name: a}\nspec: {containers: [{name: ''}]}".into(), "spec.containers[0].name: required"),
        (
            "metadata: {name: a}\nspec: {initContainers: [{name: c}], containers: [{name: c}]}".into(),
            "spec.containers[0].name: duplicate container name \"c\"",
        ),
        (
            "metadata: {name: a}\nspec: {initContainers: [{name: i, restartPolicy: Sometimes}]}".into(),
            "spec.initContainers[0].restartPolicy: unsupported restartPolicy \"Sometimes\"",
        ),
        (
            "metadata: {name: a}\nspec: {containers: [{name: c, resources: {requests: {cpu: -1}}}]}".into(),
            "spec.containers[0].resources.requests[cpu]: must be greater than or equal to 0",
        ),
        (
            "metadata: {name: a}\nspec: {containers: [{name: c, resources: {requests: {cpu: 2}, limits: {cpu: 1}}}]}".into(),
            "spec.containers[0].resources.requests[cpu]: must be less than or equal to cpu limit of 1",
        ),
        (
            "metadata: {name: a}\nspec: {containers: [{name: c, resources: {limits: {hugepages-big: 1}}}]}".into(),
            "spec.containers[0].resources.requests[hugepages-big]: \"hugepages-big\" is not a valid hugepages resource name",
        ),
        (
            format!("metadata: {{name: a}}\nspec:\n  resources: {{limits: {{ephemeral-storage: 1Gi}}}}\n{c}"),
            "spec.resources.limits[ephemeral-storage]: unsupported pod-level resource",
        ),
        (
            format!("metadata: {{name: a}}\nspec:\n  resources: {{requests: {{cpu: 3}}, limits: {{cpu: 2}}}}\n{c}"),
            "spec.resources.requests[cpu]: must be less than or equal to cpu limit of 2",
        ),
        (
            "metadata: {name: a}\nspec:\n  resources: {requests: {cpu: 2}}\n  containers: [{name: a, resources: {requests: {cpu: 2}}}, {name: b, resources: {requests: {cpu: 1}}}]".into(),
            "spec.resources.requests[cpu]: must be greater than or equal to aggregate container requests of 3",
        ),
    ];
    for (yaml, want) in cases {
        let got = err(&yaml);
        assert!(
            got.starts_with(want),
            "for\n{yaml}\n got: {got}\nwant: {want}"
        );
    }
}

/// v1.37.2 `DefaultPodLevelResources` (PodLevelResourcesFixDefaulting, on by default): pod
/// requests come from the containers' aggregate whenever `spec.resources` says anything, and pod
/// limits are defaulted per resource, to max(pod request, aggregated container limits).
#[test]
fn pod_level_defaulting_is_per_resource() {
    // Requests only: memory request from the containers, limits from the containers (all have
    // them) — a Guaranteed budget.
    let p = spec(
        r#"
metadata: {name: a}
spec:
  resources: {requests: {cpu: 2}}
  containers:
  - {name: a, resources: {limits: {cpu: 1, memory: 1Gi}}}
  - {name: b, resources: {limits: {cpu: 1, memory: 512Mi}}}
"#,
    );
    let budget = p.resources.unwrap();
    assert_eq!(budget.requests.memory, Some(3 * GI / 2));
    assert_eq!(budget.limits.cpu_milli, Some(2000));
    assert_eq!(budget.limits.memory, Some(3 * GI / 2));
    // A pod memory limit does not stop the cpu limit's defaulting; a pod request above the
    // containers' limits raises the limit to it.
    let p = spec(
        r#"
metadata: {name: a}
spec:
  resources: {requests: {cpu: 3}, limits: {memory: 2Gi}}
  containers:
  - {name: a, resources: {limits: {cpu: 1, memory: 1Gi}}}
"#,
    );
    let budget = p.resources.unwrap();
    assert_eq!(budget.limits.cpu_milli, Some(3000));
    assert_eq!(budget.requests.memory, Some(GI));
}

/// v1.37.2 `validateResourceRequirements` and `validatePodResourceConsistency`: hugepages are
/// not overcommittable (request = limit, a request needs a limit, and cpu or memory too), pod
/// hugepage limits cover the containers', and no app container's limit exceeds the pod's.
#[test]
fn the_api_servers_resource_rules_refuse_the_pod() {
    let cases: Vec<(&str, &str)> = vec![
        (
            "metadata: {name: a}\nspec:\n  resources: {requests: {cpu: 1, memory: 1Gi, hugepages-2Mi: 4Mi}}\n  containers: [{name: c}]",
            "spec.resources.limits: Limit must be set for non overcommitable resources",
        ),
        (
            "metadata: {name: a}\nspec:\n  resources: {limits: {cpu: 1, memory: 128Mi}}\n  containers: [{name: c, resources: {requests: {memory: 64Mi}, limits: {memory: 256Mi}}}]",
            "spec.resources.containers[0][memory].limits: must be less than or equal to pod limits of 134217728",
        ),
        (
            "metadata: {name: a}\nspec:\n  containers: [{name: c, resources: {requests: {memory: 1Gi, hugepages-2Mi: 2Mi}, limits: {memory: 1Gi, hugepages-2Mi: 4Mi}}}]",
            "spec.containers[0].resources.requests[hugepages-2Mi]: must be equal to hugepages-2Mi limit of 4194304",
        ),
        (
            "metadata: {name: a}\nspec:\n  containers: [{name: c, resources: {limits: {hugepages-2Mi: 4Mi}}}]",
            "spec.containers[0].resources: HugePages require cpu or memory",
        ),
        (
            "metadata: {name: a}\nspec:\n  resources: {limits: {cpu: 1, memory: 1Gi, hugepages-2Mi: 2Mi}}\n  containers: [{name: c, resources: {limits: {memory: 1Gi, hugepages-2Mi: 4Mi}}}]",
            "spec.resources.requests[hugepages-2Mi]: must be greater than or equal to aggregate container requests of 4194304",
        ),
    ];
    for (yaml, want) in cases {
        let got = err(yaml);
        assert!(
            got.starts_with(want),
            "for\n{yaml}\n got: {got}\nwant: {want}"
        );
    }
}

#[test]
fn extended_resources_are_counts_and_must_equal_their_limits() {
    let p = spec(
        r#"
metadata: {name: gpu}
spec:
  containers:
  - name: app
    resources:
      limits: {cpu: "2", memory: "1Gi", example.com/gpu: "2", ephemeral-storage: 1Gi}
"#,
    );
    let r = &p.containers[0].resources;
    assert_eq!(r.limits.extended["example.com/gpu"], 2);
    assert_eq!(r.requests.extended["example.com/gpu"], 2);
    assert_eq!(r.limits.extended.len(), 1);
    // The QoS class ignores them: still Guaranteed by cpu and memory.
    assert_eq!(
        placement::qos::pod_qos(&p, &placement::config::FeatureGates::default()),
        placement::qos::PodQos::Guaranteed
    );
    let e = err(r#"
metadata: {name: gpu}
spec:
  containers:
  - name: app
    resources:
      requests: {example.com/gpu: "1"}
      limits: {example.com/gpu: "2"}
"#);
    assert!(e.contains("must be equal to example.com/gpu limit"), "{e}");
    let e = err(r#"
metadata: {name: gpu}
spec:
  containers:
  - name: app
    resources:
      limits: {example.com/gpu: 500m}
"#);
    assert!(e.contains("must be an integer"), "{e}");
}
