//! numa-shim's part of the `List` answer, published as encoded gRPC bytes and rebuilt pod by
//! pod: each pod's `PodResources` is encoded once per registry revision of that pod, and the
//! answer is those encodings concatenated. While the registry epoch stays the same, `List`
//! sends the published bytes as they are (no copy of the answer, no protobuf encoding).
//!
//! Only this module assembles the wire form of the answer; it never holds the registry lock
//! itself (the [`RegistrySource`] copies what changed under it) and never does I/O.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;

use super::convert::pod_resources;
use super::snapshot::{RegistrySource, Revised};
use crate::proto::podresources::v1 as pr;
use crate::transport::framing::{put_prefix, PREFIX};

/// `ListPodResourcesResponse.pod_resources`: field 1, length-delimited.
const POD_RESOURCES_KEY: u8 = (1 << 3) | 2;

/// The published answer and the per-pod encodings it was assembled from.
#[derive(Debug, Default)]
pub(crate) struct Published {
    /// The registry epoch the answer belongs to; `None` before the first build or when the
    /// source cannot tell (then every call rebuilds).
    epoch: Option<u64>,
    /// Pod UID → (revision, the pod's `pod_resources` field, key and length included).
    pods: HashMap<String, (u64, Bytes)>,
    /// The gRPC-framed `ListPodResourcesResponse`.
    body: Bytes,
}

impl Published {
    /// The framed answer for the registry as it is now: the published bytes while the epoch is
    /// unchanged, else re-assembled, encoding only the pods whose revision moved.
    pub(crate) fn current(&mut self, source: &impl RegistrySource) -> Bytes {
        if self.epoch.is_some() && self.epoch == source.epoch() {
            return self.body.clone();
        }
        let (epoch, pods) = source.capture_changed(&|uid, revision| {
            self.pods.get(uid).is_some_and(|(r, _)| *r == revision)
        });
        match self.assemble(epoch, pods) {
            Some(body) => body,
            // Unreachable while the cache is only changed here; if it ever happens, a full
            // copy costs time, never a wrong answer.
            None => {
                self.pods.clear();
                let (epoch, pods) = source.capture_changed(&|_, _| false);
                self.assemble(epoch, pods).unwrap_or_default()
            }
        }
    }

    /// Assembles and publishes the answer; `None` if a pod reported as known is not cached.
    fn assemble(&mut self, epoch: Option<u64>, pods: Vec<Revised>) -> Option<Bytes> {
        let mut next = HashMap::with_capacity(pods.len());
        let mut parts = Vec::with_capacity(pods.len());
        for pod in pods {
            let encoded = match pod.entry {
                Some(entry) => encode_pod(&pod_resources(&entry)),
                None => self.pods.get(&pod.uid)?.1.clone(),
            };
            parts.push(encoded.clone());
            next.insert(pod.uid, (pod.revision, encoded));
        }
        let size: usize = parts.iter().map(Bytes::len).sum();
        let mut body = BytesMut::with_capacity(PREFIX + size);
        put_prefix(&mut body, size);
        for part in &parts {
            body.extend_from_slice(part);
        }
        self.epoch = epoch;
        self.pods = next;
        self.body = body.freeze();
        Some(self.body.clone())
    }
}

/// One pod as a `pod_resources` field of `ListPodResourcesResponse`.
fn encode_pod(pod: &pr::PodResources) -> Bytes {
    let len = pod.encoded_len();
    let mut out = BytesMut::with_capacity(1 + prost::length_delimiter_len(len) + len);
    out.put_u8(POD_RESOURCES_KEY);
    // Writing into a buffer sized for the message cannot fail.
    let _ = pod.encode_length_delimited(&mut out);
    out.freeze()
}

/// A message framed for gRPC (uncompressed).
pub(crate) fn frame(message: &impl Message) -> Bytes {
    let len = message.encoded_len();
    let mut out = BytesMut::with_capacity(PREFIX + len);
    put_prefix(&mut out, len);
    // Writing into a buffer sized for the message cannot fail.
    let _ = message.encode(&mut out);
    out.freeze()
}

/// The message inside a framed answer (without the 5-byte prefix).
pub(crate) fn message(framed: &Bytes) -> Bytes {
    framed.slice(PREFIX.min(framed.len())..)
}

/// Decodes a framed answer (for the kubelet merge and for in-process callers).
pub(crate) fn decode(framed: &Bytes) -> Result<pr::ListPodResourcesResponse, prost::DecodeError> {
    pr::ListPodResourcesResponse::decode(message(framed))
}
