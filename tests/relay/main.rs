//! The relay in a task in front of an in-process fake runtime (src/testing/relay): what is forwarded byte for byte, what is intercepted, errors, deadlines and cancels, clients, the decision off the relay's workers, state writes and `inspect` against a live relay.
//!
//! One test binary; each module was its own binary before.

mod cancel;
mod clients;
mod deadlines;
mod decision_off_worker;
mod errors;
mod headers;
mod inspect_live;
mod intercept;
mod lifecycle;
mod passthrough;
mod state_writes;
mod trailers_only;
