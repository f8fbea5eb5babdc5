//! Compiles the CRI v1, PodResources v1, kubelet Pods API, device plugin v1beta1 and plugin
//! registration protos with protox (no system `protoc`) and generates
//! prost messages plus tonic clients and servers for each.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/cri/api.proto",
        "proto/podresources/api.proto",
        "proto/podsapi/api.proto",
        "proto/podsapi/core_v1.proto",
        "proto/deviceplugin/api.proto",
        "proto/pluginregistration/api.proto",
    ];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let fds = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .generate_default_stubs(true)
        .compile_fds(fds)?;
    Ok(())
}
