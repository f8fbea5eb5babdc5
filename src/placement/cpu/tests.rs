//! Tests over the whole CPU manager: kubelet's takeByTopology rows and accumulator orderings
//! (`take`), the shared `T*/S*/P*` vectors (`vectors`), policy behaviour (`policy`) and property
//! tests (`props`; `index`: indexes and one-pass counts against brute-force scans). `fixtures`
//! loads the shared topology JSON (test-only, deliberately tiny).

mod fixtures;
mod index;
mod mixed;
mod plrm;
mod policy;
mod props;
mod restore;
mod take;
mod vectors;
