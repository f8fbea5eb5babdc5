//! numa-shim's PodResources server: its answers, merged with a fake kubelet's, read by Go and Python clients, the pool gauges, and device facts from the kubelet's socket.
//!
//! One test binary; each module was its own binary before.

mod answers;
mod device_facts;
mod device_front;
mod kubelet;
mod pool_gauges;
mod python;
