//! Playing a scenario: the node built from the settings, then each step in order (admit,
//! start, remove, API refusal), with the book of what became of every pod.
//!
//! Removals follow kubelet v1.37.2: a container that stops (`remove` with `container`) leaves
//! the report but keeps its CPUs and memory while its pod is active (the kubelet's
//! PostStopContainer reaches only the Topology Manager); it may start again. A removed pod gives
//! back everything it holds.

use std::collections::{BTreeMap, BTreeSet};

use super::report::{Book, Report};
use super::steps::{self, StepSnapshot};
use super::{Scenario, ScenarioError, Step};
use crate::k8s::ConfigWarning;
use crate::placement::node::Node;

/// A scenario being played.
pub(super) struct Run<'s> {
    scenario: &'s Scenario,
    node: Node,
    book: Book,
    /// Pod uid → containers that stopped (and did not start again).
    stopped: BTreeMap<String, BTreeSet<String>>,
}

impl<'s> Run<'s> {
    /// Builds the node. `strict`: refuse what the kubelet refuses to start with even where
    /// numa-shim only warns (the static CPU policy without reserved CPUs).
    pub(super) fn start(
        scenario: &'s Scenario,
        strict: bool,
        adjust: &dyn Fn(&mut crate::placement::Config),
    ) -> Result<(Self, Vec<ConfigWarning>), ScenarioError> {
        let mut resolved = scenario
            .kubelet
            .resolve(&scenario.topology)
            .map_err(|source| ScenarioError::Kubelet {
                origin: scenario.origin.clone(),
                source: Box::new(source),
            })?;
        if strict {
            resolved.config.accept_no_reserved_cpus = false;
        }
        adjust(&mut resolved.config);
        let node_err = |source| ScenarioError::Node {
            origin: scenario.origin.clone(),
            source: Box::new(source),
        };
        let mut node = Node::new(scenario.topology.clone(), resolved.config).map_err(node_err)?;
        if !scenario.devices.is_empty() {
            node.set_devices(crate::placement::device::DeviceFacts {
                allocatable: scenario.devices.clone(),
                ..Default::default()
            });
        }
        if !scenario.unavailable_cpus.is_empty() {
            node.mark_unavailable(&scenario.unavailable_cpus)
                .map_err(node_err)?;
        }
        let run = Self {
            scenario,
            node,
            book: Book::default(),
            stopped: BTreeMap::new(),
        };
        Ok((run, resolved.warnings))
    }

    pub(super) fn report(&self) -> Report {
        self.book.report(&self.node, &self.stopped)
    }

    pub(super) fn snapshot(&self) -> StepSnapshot {
        steps::snapshot(&self.book, &self.node, &self.stopped)
    }

    fn origin(&self) -> String {
        self.scenario.origin.clone()
    }

    pub(super) fn step(&mut self, step: &Step) -> Result<(), ScenarioError> {
        match step {
            Step::Admit { at, pod, start } => {
                let key = format!("{}/{}", pod.namespace, pod.name);
                if self.book.live_uid(&key).is_some() {
                    return Err(ScenarioError::DuplicatePod {
                        origin: self.origin(),
                        at: at.clone(),
                        pod: key,
                    });
                }
                let result = self.node.admit(pod);
                let admitted = result.is_ok();
                self.book.admitted(pod, result.map(|_| ()));
                if admitted && *start {
                    for c in pod.init_containers.iter().chain(&pod.containers) {
                        self.node.start_container(&pod.uid, &c.name);
                    }
                }
                Ok(())
            }
            Step::Start {
                at,
                namespace,
                name,
                containers,
            } => {
                let uid = self.live_uid(at, namespace, name)?;
                for c in containers {
                    if !self.node.start_container(&uid, c) {
                        return Err(self.unknown_container(at, namespace, name, c));
                    }
                    if let Some(set) = self.stopped.get_mut(&uid) {
                        set.remove(c);
                    }
                }
                Ok(())
            }
            Step::Remove {
                at,
                namespace,
                name,
                container,
            } => self.remove(at, namespace, name, container.as_deref()),
            Step::Resize {
                at,
                namespace,
                name,
                container,
                resources,
            } => self.resize(at, namespace, name, container.as_deref(), resources),
            Step::Refused {
                namespace,
                name,
                error,
                ..
            } => {
                self.book.refused(namespace, name, error.clone());
                Ok(())
            }
        }
    }

    fn resize(
        &mut self,
        at: &str,
        namespace: &str,
        name: &str,
        container: Option<&str>,
        resources: &crate::placement::Resources,
    ) -> Result<(), ScenarioError> {
        use crate::placement::node::ResizeError;
        let uid = self.live_uid(at, namespace, name)?;
        let result = match container {
            Some(c) => self.node.resize_container(&uid, c, resources),
            None => self.node.resize_pod(&uid, resources),
        };
        match result {
            Ok(_) => {
                self.book
                    .resized(&format!("{namespace}/{name}"), container, resources, None);
                Ok(())
            }
            Err(ResizeError::UnknownContainer { container, .. }) => {
                Err(self.unknown_container(at, namespace, name, &container))
            }
            Err(e) => {
                self.book.resized(
                    &format!("{namespace}/{name}"),
                    container,
                    resources,
                    Some(e.to_string()),
                );
                Ok(())
            }
        }
    }

    fn live_uid(&self, at: &str, namespace: &str, name: &str) -> Result<String, ScenarioError> {
        let key = format!("{namespace}/{name}");
        self.book
            .live_uid(&key)
            .ok_or_else(|| ScenarioError::UnknownPod {
                origin: self.origin(),
                at: at.to_string(),
                pod: key,
            })
    }

    fn unknown_container(
        &self,
        at: &str,
        namespace: &str,
        name: &str,
        container: &str,
    ) -> ScenarioError {
        ScenarioError::UnknownContainer {
            origin: self.origin(),
            at: at.to_string(),
            pod: format!("{namespace}/{name}"),
            container: container.to_string(),
        }
    }

    fn remove(
        &mut self,
        at: &str,
        namespace: &str,
        name: &str,
        container: Option<&str>,
    ) -> Result<(), ScenarioError> {
        let key = format!("{namespace}/{name}");
        if container.is_none() && self.book.is_refused_or_rejected(&key) {
            self.book.removed(&key);
            return Ok(());
        }
        let uid = self.live_uid(at, namespace, name)?;
        match container {
            None => {
                self.node.remove_pod(&uid);
                self.stopped.remove(&uid);
                self.book.removed(&key);
            }
            Some(c) => {
                if self.node.container(&uid, c).is_none() {
                    return Err(self.unknown_container(at, namespace, name, c));
                }
                let stopped = self.stopped.get(&uid).is_some_and(|s| s.contains(c));
                if !self.node.is_started(&uid, c) || stopped {
                    return Err(ScenarioError::NotStarted {
                        origin: self.origin(),
                        at: at.to_string(),
                        pod: key,
                        container: c.to_string(),
                    });
                }
                self.stopped.entry(uid).or_default().insert(c.to_string());
            }
        }
        Ok(())
    }
}
