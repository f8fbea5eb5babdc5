//! The relay's test support: an in-process fake runtime that records every request's bytes and
//! headers ([`fake`]), numa-shim's relay running in a task with tonic and raw HTTP/2 clients
//! ([`client`]), hand-made HTTP/2 frames for what clients must not be trusted to send
//! ([`frames`]), and a relay wired to a live placer ([`live`]).

pub mod client;
pub mod fake;
pub mod frames;
pub mod live;
