//! The seam between the relay and whatever decides placement: the [`Hook`] trait, the decoded
//! calls it sees and the decisions it returns. Owns no policy; the default hook changes nothing.

use std::collections::BTreeMap;
use std::future::Future;

use prost::Message;
use tonic::Status;

use crate::proto::cri::v1 as cri;

/// The CRI methods the relay decodes. The first four are asked about (the first three may be
/// rewritten); the others are only
/// observed (their outcome is reported to [`Hook::after`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    RunPodSandbox,
    CreateContainer,
    UpdateContainerResources,
    UpdatePodSandboxResources,
    StopPodSandbox,
    RemovePodSandbox,
    StopContainer,
    RemoveContainer,
}

/// A decoded request of one of the [`Method`]s, as the runtime will see it. The three large
/// messages are boxed.
#[derive(Debug, Clone, PartialEq)]
pub enum CriRequest {
    RunPodSandbox(Box<cri::RunPodSandboxRequest>),
    CreateContainer(Box<cri::CreateContainerRequest>),
    UpdateContainerResources(Box<cri::UpdateContainerResourcesRequest>),
    UpdatePodSandboxResources(Box<cri::UpdatePodSandboxResourcesRequest>),
    StopPodSandbox(cri::StopPodSandboxRequest),
    RemovePodSandbox(cri::RemovePodSandboxRequest),
    StopContainer(cri::StopContainerRequest),
    RemoveContainer(cri::RemoveContainerRequest),
}

/// A decoded successful runtime response of one of the [`Method`]s.
#[derive(Debug, Clone, PartialEq)]
pub enum CriResponse {
    RunPodSandbox(cri::RunPodSandboxResponse),
    CreateContainer(cri::CreateContainerResponse),
    UpdateContainerResources(cri::UpdateContainerResourcesResponse),
    UpdatePodSandboxResources(cri::UpdatePodSandboxResourcesResponse),
    StopPodSandbox(cri::StopPodSandboxResponse),
    RemovePodSandbox(cri::RemovePodSandboxResponse),
    StopContainer(cri::StopContainerResponse),
    RemoveContainer(cri::RemoveContainerResponse),
}

/// What [`Hook::before`] wants done with an intercepted request. `D` is what the hook decided,
/// handed back to [`Hook::after`] with the runtime's outcome, so the decision travels one way
/// as a value and is never read back from the forwarded bytes.
#[derive(Debug, Clone)]
pub enum Decision<D = ()> {
    /// Forward the request byte for byte; `after` gets no decision.
    Continue,
    /// Forward the request with `patch` set (appended on the wire, see [`Patch`]; an empty
    /// patch forwards the original bytes); `after` gets `decided`.
    Forward { patch: Patch, decided: D },
    /// Do not forward; answer the caller with this status.
    Reject(Status),
}

impl Decision<()> {
    /// Forward with `patch` set, nothing to hand to `after`.
    pub fn patch(patch: Patch) -> Self {
        Self::Forward { patch, decided: () }
    }
}

/// Fields to set on an intercepted request. Only the fields given here are written; everything
/// else, including fields numa-shim does not know, reaches the runtime unchanged.
///
/// Where they land: RunPodSandbox → `config.linux.resources` / `config.annotations`;
/// CreateContainer → `config.linux.resources` / `config.annotations`;
/// UpdateContainerResources → `linux` / `annotations`; UpdatePodSandboxResources: nothing (a
/// patch for it is ignored).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Patch {
    /// Linux resource fields to set.
    pub resources: ResourcesPatch,
    /// Annotations to add or overwrite.
    pub annotations: BTreeMap<String, String>,
}

/// `LinuxContainerResources` fields a patch may set; `None` leaves a field as sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourcesPatch {
    pub cpu_period: Option<i64>,
    pub cpu_quota: Option<i64>,
    pub cpu_shares: Option<i64>,
    pub cpuset_cpus: Option<String>,
    pub cpuset_mems: Option<String>,
}

/// How the runtime answered a forwarded call.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The final gRPC status (`Code::Ok` on success); UNAVAILABLE when the runtime was not reached.
    pub status: Status,
    /// The decoded response on success (absent on error or if it did not decode).
    pub response: Option<CriResponse>,
}

/// Plugged into the relay to decide on and observe the decoded calls.
///
/// Contract: `before` runs for RunPodSandbox, CreateContainer, UpdateContainerResources and
/// UpdatePodSandboxResources before anything is forwarded. For every call that was forwarded (all observed methods, and
/// intercepted ones that `before` let through) `after` runs exactly once with the runtime's
/// outcome, even if the caller went away meanwhile. A call cut off by the caller's deadline or
/// hang-up is cancelled at the runtime; its outcome is then what the runtime shows when asked:
/// a success with the id of the sandbox or container the runtime created anyway, else the
/// cut-off status (DEADLINE_EXCEEDED or CANCELLED), reported only once the runtime has
/// answered (see `relay::settle`). `after` receives the request as the caller sent it and what
/// `before` decided for it (`None` for observed methods and `Continue`); the patched bytes are
/// never decoded again. Calls run concurrently: implementations synchronise themselves.
pub trait Hook: Send + Sync + 'static {
    /// What `before` decides for one call and `after` gets back (`()` when nothing is kept).
    type Decided: Send + 'static;

    /// Decides what to do with an intercepted request.
    fn before(&self, request: &CriRequest) -> impl Future<Output = Decision<Self::Decided>> + Send {
        let _ = request;
        async { Decision::Continue }
    }

    /// Observes the outcome of a forwarded decoded call.
    fn after(
        &self,
        request: &CriRequest,
        decided: Option<Self::Decided>,
        outcome: &Outcome,
    ) -> impl Future<Output = ()> + Send {
        let _ = (request, decided, outcome);
        async {}
    }
}

/// The hook that changes nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopHook;

impl Hook for NoopHook {
    type Decided = ();
}

/// A shared hook, so its owner can keep a handle (e.g. to read the state it maintains).
impl<T: Hook> Hook for std::sync::Arc<T> {
    type Decided = T::Decided;

    fn before(&self, request: &CriRequest) -> impl Future<Output = Decision<Self::Decided>> + Send {
        T::before(self, request)
    }

    fn after(
        &self,
        request: &CriRequest,
        decided: Option<Self::Decided>,
        outcome: &Outcome,
    ) -> impl Future<Output = ()> + Send {
        T::after(self, request, decided, outcome)
    }
}

const RUNTIME: &str = "/runtime.v1.RuntimeService/";

impl Method {
    /// Every decoded method.
    pub const ALL: [Self; 8] = [
        Self::RunPodSandbox,
        Self::CreateContainer,
        Self::UpdateContainerResources,
        Self::UpdatePodSandboxResources,
        Self::StopPodSandbox,
        Self::RemovePodSandbox,
        Self::StopContainer,
        Self::RemoveContainer,
    ];

    /// The method for a gRPC request path, if it is one the relay decodes.
    pub fn from_path(path: &str) -> Option<Self> {
        let name = path.strip_prefix(RUNTIME)?;
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The method's name in the RuntimeService.
    pub fn name(self) -> &'static str {
        match self {
            Self::RunPodSandbox => "RunPodSandbox",
            Self::CreateContainer => "CreateContainer",
            Self::UpdateContainerResources => "UpdateContainerResources",
            Self::UpdatePodSandboxResources => "UpdatePodSandboxResources",
            Self::StopPodSandbox => "StopPodSandbox",
            Self::RemovePodSandbox => "RemovePodSandbox",
            Self::StopContainer => "StopContainer",
            Self::RemoveContainer => "RemoveContainer",
        }
    }

    /// Whether [`Hook::before`] runs (and may patch or reject) for this method.
    pub fn is_intercepted(self) -> bool {
        matches!(
            self,
            Self::RunPodSandbox
                | Self::CreateContainer
                | Self::UpdateContainerResources
                | Self::UpdatePodSandboxResources
        )
    }
}

impl CriRequest {
    /// Decodes a request message of `method`.
    pub fn decode(method: Method, message: &[u8]) -> Result<Self, prost::DecodeError> {
        Ok(match method {
            Method::RunPodSandbox => Self::RunPodSandbox(Box::new(Message::decode(message)?)),
            Method::CreateContainer => Self::CreateContainer(Box::new(Message::decode(message)?)),
            Method::UpdateContainerResources => {
                Self::UpdateContainerResources(Box::new(Message::decode(message)?))
            }
            Method::UpdatePodSandboxResources => {
                Self::UpdatePodSandboxResources(Box::new(Message::decode(message)?))
            }
            Method::StopPodSandbox => Self::StopPodSandbox(Message::decode(message)?),
            Method::RemovePodSandbox => Self::RemovePodSandbox(Message::decode(message)?),
            Method::StopContainer => Self::StopContainer(Message::decode(message)?),
            Method::RemoveContainer => Self::RemoveContainer(Message::decode(message)?),
        })
    }

    /// The method this request belongs to.
    pub fn method(&self) -> Method {
        match self {
            Self::RunPodSandbox(_) => Method::RunPodSandbox,
            Self::CreateContainer(_) => Method::CreateContainer,
            Self::UpdateContainerResources(_) => Method::UpdateContainerResources,
            Self::UpdatePodSandboxResources(_) => Method::UpdatePodSandboxResources,
            Self::StopPodSandbox(_) => Method::StopPodSandbox,
            Self::RemovePodSandbox(_) => Method::RemovePodSandbox,
            Self::StopContainer(_) => Method::StopContainer,
            Self::RemoveContainer(_) => Method::RemoveContainer,
        }
    }
}

impl CriResponse {
    /// Decodes a response message of `method`.
    pub fn decode(method: Method, message: &[u8]) -> Result<Self, prost::DecodeError> {
        Ok(match method {
            Method::RunPodSandbox => Self::RunPodSandbox(Message::decode(message)?),
            Method::CreateContainer => Self::CreateContainer(Message::decode(message)?),
            Method::UpdateContainerResources => {
                Self::UpdateContainerResources(Message::decode(message)?)
            }
            Method::UpdatePodSandboxResources => {
                Self::UpdatePodSandboxResources(Message::decode(message)?)
            }
            Method::StopPodSandbox => Self::StopPodSandbox(Message::decode(message)?),
            Method::RemovePodSandbox => Self::RemovePodSandbox(Message::decode(message)?),
            Method::StopContainer => Self::StopContainer(Message::decode(message)?),
            Method::RemoveContainer => Self::RemoveContainer(Message::decode(message)?),
        })
    }
}

impl Patch {
    /// Whether the patch sets nothing.
    pub fn is_empty(&self) -> bool {
        self.resources == ResourcesPatch::default() && self.annotations.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_methods_and_back() {
        for m in Method::ALL {
            let path = format!("{RUNTIME}{}", m.name());
            assert_eq!(Method::from_path(&path), Some(m));
        }
        assert_eq!(
            Method::from_path("/runtime.v1.RuntimeService/Version"),
            None
        );
        assert_eq!(
            Method::from_path("/runtime.v1.ImageService/PullImage"),
            None
        );
        assert_eq!(
            Method::from_path("/runtime.v1alpha2.RuntimeService/CreateContainer"),
            None
        );
        let intercepted: Vec<_> = Method::ALL
            .into_iter()
            .filter(|m| m.is_intercepted())
            .collect();
        assert_eq!(intercepted.len(), 4);
    }

    #[test]
    fn decode_reports_malformed_bytes() {
        assert!(CriRequest::decode(Method::CreateContainer, &[0x0a, 0x05, b'a']).is_err());
        let ok = CriRequest::decode(Method::StopContainer, &[0x0a, 0x01, b'c']).unwrap();
        assert_eq!(ok.method(), Method::StopContainer);
    }
}
