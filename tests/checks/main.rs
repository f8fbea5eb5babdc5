//! Checks without sockets or runtimes: the layer order of ARCHITECTURE.md, configs and examples, the shared vectors, topology and kubelet-config checks, refusal texts.
//!
//! One test binary; each module was its own binary before.

mod architecture;
mod cli_topology;
mod config_examples;
mod config_validation;
mod crio_config;
mod examples;
mod kubelet_config_check;
mod refusals;
mod vectors;

/// The real-peer suites' support, in the library, runs the binary cargo built for the test: the
/// one `CARGO_BIN_EXE_numa-shim` names.
#[test]
fn support_finds_the_built_binary() {
    assert_eq!(
        numa_shim::testing::process::built_binary(),
        std::path::Path::new(env!("CARGO_BIN_EXE_numa-shim"))
    );
}
